// schedule_spec.cpp — see schedule_spec.h.
#include "spec/schedule_spec.h"

namespace gr {

ScheduleSpec read_schedule(const JsonAt& j) {
  ScheduleSpec s;
  if (j.has("kind")) s.kind = j.at("kind").str();
  if (s.kind == "constant") j.only_keys({"kind", "warmup"});
  else if (s.kind == "step") j.only_keys({"kind", "every", "gamma", "warmup"});
  else if (s.kind == "cosine") j.only_keys({"kind", "min_lr", "epochs", "warmup"});
  else j.at("kind").fail("unknown schedule \"" + s.kind + "\" (known: constant, step, cosine)");
  if (j.has("every")) s.every = j.at("every").integer(1, 100000000);
  if (j.has("gamma")) s.gamma = j.at("gamma").positive();
  if (j.has("min_lr")) {
    s.min_lr = j.at("min_lr").number();
    if (!(s.min_lr >= 0)) j.at("min_lr").fail("min_lr must be >= 0");
  }
  if (j.has("epochs")) s.epochs = j.at("epochs").integer(1, 100000000);
  if (j.has("warmup")) {
    const JsonAt w = j.at("warmup");
    w.only_keys({"steps"});
    s.warmup_steps = w.at("steps").integer(1, 1000000000);
  }
  return s;
}

}  // namespace gr
