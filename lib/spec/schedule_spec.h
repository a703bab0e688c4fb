// schedule_spec.h — parsing optimizer.schedule (the numbers: lib/train/schedule.h).
#pragma once
#include "spec/json_reader.h"
#include "spec/spec.h"

namespace gr {

// {"kind": "constant" | "step" | "cosine", "every": epochs, "gamma": g, "min_lr": m, "epochs": period,
//  "warmup": {"steps": w}}; each key only where its kind uses it. Located errors (InputError).
// A cosine period left out is 0 here; load_spec fills in train.epochs.
ScheduleSpec read_schedule(const JsonAt& j);

}  // namespace gr
