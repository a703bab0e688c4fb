// run_diff.h — `gradrun diff RUN_A RUN_B`: where two runs part (docs/cli.md).
//
// Without --at: the first differing loss.csv step (with its epoch and abs/rel difference), the
// first differing metrics.csv epoch (seconds aside), every parameter of the final weights that
// differs (max abs and rel), and the receipts' differing fields.
// With --at STEP: both runs are replayed on the CPU tape from their init.safetensors up to STEP − 1
// (the trainer's loop: the same rows, dropout keys, learning rates and optimizer, so the same bits),
// then step STEP is recorded on both and compared node by node (matched by id, in graph order):
// the first node whose forward value differs, else the first whose gradient differs in the order
// backward computes them, with its shape and largest difference. Each replay's loss at STEP is
// checked against its own loss.csv, so a replay that does not reproduce its run says so.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gr {

struct RunDiff {
  bool same = true;
  std::vector<std::string> lines;  // the report, one finding a line
};

// InputError for a folder that is not a run of this gradrun.
RunDiff diff_runs(const std::string& run_a, const std::string& run_b);
// InputError when STEP is out of range or a run cannot be replayed on the CPU tape (train.shards > 1).
RunDiff diff_runs_at(const std::string& run_a, const std::string& run_b, int64_t step);

}  // namespace gr
