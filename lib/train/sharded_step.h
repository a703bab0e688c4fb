// sharded_step.h — the data-parallel training step of train.shards (docs/distributed.md).
//
// A step's batch of S·b rows is cut into S contiguous shards of b rows (the graph is resolved at b).
// Its gradient is defined without processes:
//   g = Σ_{s=0}^{S-1} (1/S)·g_s        (g_s: shard s's gradient, seed 1; summed in ascending s)
//   L = Σ_{s=0}^{S-1} (1/S)·L_s
// and the optimizer step is Optimizer's, on g (its global norm summed in the optimizer's order).
// With S = 1, (1/S)·g_0 = g_0 and the step is the plain one, bit for bit.
//
// With R processes (R divides S), rank r records shards [r·S/R, (r+1)·S/R) and owns the flat
// parameter range [lo_r, hi_r) (Optimizer's registration order, split evenly):
//   1. all-to-all: every shard's scaled gradient slice goes to the slice's owner, which sums the
//      S slices in shard order (a deterministic reduce-scatter);
//   2. the norm's Σ g·g runs along the ranks in flat order (rank r continues rank r−1's partial sum),
//      so it is the one-process sum exactly; the last rank broadcasts the norm;
//   3. each owner runs the optimizer on its range only (moments sharded, as ZeRO stage 1);
//   4. all-gather: the updated parameters back to every rank.
// The shard losses (and each rank's "interrupt requested" flag) are all-gathered and summed in
// shard order on every rank. MPI only moves values; every sum is ours, in an order fixed by S.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/backend.h"
#include "dist/comm.h"
#include "grad/optimizer.h"
#include "replay/episode.h"
#include "train/device_runner.h"
#include "train/model.h"

namespace gr {

// What a step moves between ranks, per rank (the run's inspect and docs/distributed.md's model).
struct ShardTraffic {
  int64_t send_doubles = 0, recv_doubles = 0;  // all-to-all + all-gather + losses, excluding self
};
// Per-step traffic of rank 0 for P flat parameters, S shards on R processes.
ShardTraffic shard_traffic(int64_t params, int64_t shards, int64_t processes);

class ShardedStep {
 public:
  // comm: the process group (dist::solo() for one process; R must divide S). backend: null for the
  // CPU tape; otherwise the shards' forward and backward replay there (f64) as one captured episode
  // each, and the gradients come back to host memory for the exchange.
  ShardedStep(Model& model, Optimizer& opt, dist::Comm& comm, std::unique_ptr<device::Backend> backend = nullptr,
              FuseMode fuse = FuseMode::Off);
  ~ShardedStep();

  struct Outcome {
    double loss;             // L (the step's loss, the same on every rank)
    double grad_norm;        // the global gradient norm (Optimizer::last_grad_norm)
    bool interrupt = false;  // some rank asked to stop (SIGINT/SIGTERM): every rank stops here
  };
  // One optimizer step over `rows` (S equal shards; a last partial batch too when it splits into S),
  // t the run's step (1-based). Collective: every rank calls it with the same rows.
  Outcome step(const DataTable& table, std::span<const int64_t> rows, int64_t t, bool interrupt_requested);
  // The full optimizer state on rank 0, from the owners' ranges (for a checkpoint). Collective.
  void gather_optimizer_state();
  // On a device: the host copies of the fixed leaves between evaluations (HostCopies); 0 / no-op on
  // the CPU tape. Local to each rank.
  size_t release_host_copies() { return episode_ ? host_copies_.release() : 0; }
  void restore_host_copies() {
    if (episode_) host_copies_.restore(*episode_);
  }
  int64_t first_shard() const { return s_lo_; }
  int64_t shard_end() const { return s_hi_; }
  std::string describe() const;

 private:
  void shard_gradient(const DataTable& table, std::span<const int64_t> rows, int64_t t, int64_t s, double* flat, double* loss);
  void exchange_and_update(const std::vector<double>& local_losses, bool interrupt, Outcome& out);

  Model& model_;
  Optimizer& opt_;
  dist::Comm& comm_;
  int64_t S_, R_, r_, s_lo_, s_hi_, P_;
  std::vector<int64_t> lo_;              // lo_[q]: rank q's first flat element; lo_[R] = P
  std::vector<char> active_;             // per optimizer entry: backward reaches it (structural)
  std::vector<double> send_, recv_, acc_, flat_, params_, gather_counts_d_;
  std::vector<int64_t> scount_, sdispl_, rcount_, rdispl_, pcount_, pdispl_, lcount_, ldispl_;
  std::unique_ptr<device::Backend> backend_;
  std::unique_ptr<replay::Episode> episode_;  // null: the CPU tape
  HostCopies host_copies_{model_};
};

}  // namespace gr
