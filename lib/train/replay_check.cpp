#include "train/replay_check.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "replay/episode.h"
#include "replay/replay.h"
#include "train/checks.h"
#include "train/device_runner.h"
#include "tensor/same_bits.h"

namespace gr {

namespace {

std::string bits(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The spec node an id belongs to (the last spec node whose first tape node is <= id), for messages.
std::string describe_node(Model& model, const std::vector<Var>& nodes, int32_t id) {
  const Node& n = model.tape().node(id);
  std::string s = "node " + std::to_string(id) + " (" + std::string(op_name(n.op)) + " " + n.shape.str();
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].id == id) s += ", spec node \"" + model.program().nodes[i].spec->id + "\"";
  return s + ")";
}

}  // namespace

ReplayCheckResult check_replay(Model& model, std::unique_ptr<device::Backend> backend, int64_t episodes, FuseMode fuse,
                               unsigned block, unsigned max_grid) {
  ReplayCheckResult r;
  Optimizer opt = model.make_optimizer();
  Optimizer device_opt = model.make_optimizer();
  DeviceRunner runner(model, device_opt, std::move(backend), model.real(), fuse, block, max_grid);
  r.device = runner.describe();
  replay::Episode& ep = runner.episode();
  const Spec& spec = model.spec();
  const int64_t n = spec.data ? model.data().train.rows : 0, batch = spec.data ? model.program().batch : 0;
  const int64_t steps_per_epoch = spec.data ? n / batch : 1;
  std::vector<int64_t> order, rows;
  std::vector<double> want, got;
  for (int64_t e = 0; e < episodes; ++e) {
    const int64_t s = e % steps_per_epoch;
    if (s == 0) order = epoch_order(spec, n, e / steps_per_epoch);
    rows.clear();
    for (int64_t i = s * batch; i < (s + 1) * batch; ++i) rows.push_back(order[static_cast<size_t>(i)]);
    // Device: inputs, forward, backward (launch by launch). CPU: the same episode on the tape.
    runner.upload_batch(model.data().train, rows);
    ep.set_dropout_key(model.dropout_key(e + 1));  // episode e + 1 is training step e + 1: its masks
    ep.forward();
    ep.backward();
    const std::vector<Var>& nodes = model.record(model.data().train, rows, model.dropout_key(e + 1));
    const Var loss = nodes[static_cast<size_t>(model.program().loss)];
    model.tape().backward(loss);
    model.update_running_stats();  // the device's forward took the step's running-statistics update (batch_norm)
    for (int32_t id = 0; id < model.tape().size() && r.equal; ++id) {
      const Var v{id};
      const ConstTensorView cv = model.tape().value(v);
      want.assign(cv.values().begin(), cv.values().end());
      got.resize(want.size());
      ep.value(v, got);
      for (int pass = 0; pass < 2 && r.equal; ++pass) {
        for (size_t i = 0; i < want.size(); ++i)
          if (!same_bits(want[i], got[i])) {
            r.equal = false;
            r.first_difference = "episode " + std::to_string(e + 1) + ": " + describe_node(model, nodes, id) + " " +
                                 (pass ? "gradient" : "value") + " element " + std::to_string(i) + ": cpu " + bits(want[i]) +
                                 ", device " + bits(got[i]);
            break;
          }
        if (pass == 0 && ep.program().backward_active(v)) {
          const ConstTensorView cg = model.tape().grad(v);
          want.assign(cg.values().begin(), cg.values().end());
          ep.grad(v, got);
        } else {
          break;
        }
      }
    }
    if (!r.equal) {
      model.reset();
      return r;
    }
    opt.step(model.tape());
    runner.optimizer().step();
    model.reset();
    r.episodes = e + 1;
  }
  // Finally the parameters themselves, after the last update.
  for (size_t k = 0; k < model.params().size() && r.equal; ++k) {
    const std::span<double> w = model.tape().param_value(model.params()[k]);
    want.assign(w.begin(), w.end());
    got.resize(want.size());
    ep.value(model.params()[k], got);
    if (first_different(want, got) >= 0) {
      r.equal = false;
      r.first_difference = "after " + std::to_string(episodes) + " episodes: parameter \"" + model.program().params[k].name +
                           "\" differs";
    }
  }
  return r;
}

}  // namespace gr
