// fused_program.cpp — the fused driver (docs/fusion.md): compiles the plan's module, uploads the
// pointer table (values, gradients, gradient slab), builds the forward / backward launch sequences
// (fused segments interleaved with per-node launches) and captures / replays whole episodes.
#include <algorithm>

#include "fuse/fuse.h"

namespace gr::fuse {

FusedProgram::FusedProgram(replay::Program& prog, Plan plan) : prog_(prog), be_(prog.backend()), plan_(std::move(plan)) {
  if (plan_.nodes != prog.size() || plan_.dtype != prog.dtype())
    throw Error("fuse: the plan was made for another program (" + std::to_string(plan_.nodes) + " nodes)");
  const int32_t n = prog.size();
  std::vector<int64_t> tab(static_cast<size_t>(2 * n + 1), 0);
  for (int32_t k = 0; k < n; ++k) {
    tab[static_cast<size_t>(k)] = static_cast<int64_t>(prog.value_address(k));
    tab[static_cast<size_t>(n + k)] = static_cast<int64_t>(prog.grad_address(k));
  }
  tab[static_cast<size_t>(2 * n)] = static_cast<int64_t>(prog.grad_slab().handle);
  table_ = be_.alloc(tab.size() * sizeof(int64_t));
  be_.upload(table_, tab.data(), tab.size() * sizeof(int64_t));
  module_ = be_.compile(plan_.source, plan_.module_name);

  const unsigned block = prog.block(), maxg = prog.max_grid();
  // Row kernels: one block per row; the others: grid-stride over `work` elements.
  auto grid_for = [&](int64_t work, bool rows, unsigned blk) {
    const int64_t blocks = rows ? std::max<int64_t>(work, 1) : (std::max<int64_t>(work, 1) + blk - 1) / blk;
    return static_cast<unsigned>(std::min<int64_t>(blocks, maxg));
  };
  // A generated kernel's block is fitted to its own limit first (fused kernels hold more registers
  // than per-node ones: on CUDA fewer threads per block may fit); every kernel strides, so any
  // block size gives the same bits.
  auto gen = [&](const std::string& name, int64_t work, bool per_row, unsigned blk, int64_t rows) {
    Step s;
    s.rows = rows;
    s.kernel = be_.kernel(module_, name);
    s.block = device::fit_block(be_, s.kernel, blk);
    s.grid = grid_for(work, per_row, s.block);
    return s;
  };
  auto node = [](int32_t id) {
    Step s;
    s.node = id;
    return s;
  };
  std::vector<const Segment*> at_lo(static_cast<size_t>(n), nullptr), at_hi(static_cast<size_t>(n), nullptr);
  for (const Segment& seg : plan_.segments) {
    at_lo[static_cast<size_t>(seg.lo)] = &seg;
    at_hi[static_cast<size_t>(seg.bwd_fused && seg.head >= 0 ? seg.head : seg.hi)] = &seg;
  }
  // Forward: tape order; a segment at its first id.
  for (int32_t id = 0; id < n; ++id) {
    if (const Segment* seg = at_lo[static_cast<size_t>(id)]) {
      fwd_.push_back(seg->kind == SegKind::Row ? gen(seg->fwd, seg->rows, true, block, seg->rows) : gen(seg->fwd, 1, true, 1, 1));
      id = seg->hi;
      continue;
    }
    if (prog.node_forward_launches(id) > 0) fwd_.push_back(node(id));
  }
  // Backward: the fill (+ seed), then descending ids; a segment at its last id.
  if (!plan_.fill.empty()) bwd_.push_back(gen(plan_.fill, plan_.fill_width, false, block, 0));
  for (int32_t id = n - 1; id >= 0; --id) {
    const Segment* seg = at_hi[static_cast<size_t>(id)];
    if (seg && seg->bwd_fused) {
      if (seg->kind == SegKind::Row) {
        if (!seg->bwd_row.empty()) bwd_.push_back(gen(seg->bwd_row, seg->rows, true, block, seg->rows));
        if (!seg->bwd_param.empty()) bwd_.push_back(gen(seg->bwd_param, seg->param_width, false, block, seg->rows));
      } else {
        bwd_.push_back(gen(seg->bwd_row, 1, true, 1, 1));
      }
      id = seg->lo;
      continue;
    }
    if (prog.node_backward_launches(id) > 0) bwd_.push_back(node(id));
  }
}

FusedProgram::FusedProgram(std::unique_ptr<replay::Program> prog, Plan plan) : FusedProgram(*prog, std::move(plan)) {
  owned_ = std::move(prog);
}

FusedProgram::~FusedProgram() {
  if (episode_id_ != 0 && be_.capture_id() == episode_id_) be_.clear_capture();  // it launches into table_
  try {
    be_.free(table_);
  } catch (...) {
  }
}

void FusedProgram::run(const std::vector<Step>& steps, bool forward) {
  uint64_t vt = table_.handle;
  for (const Step& s : steps) {
    if (!s.kernel) {
      if (forward) prog_.run_node_forward(s.node);
      else prog_.run_node_backward(s.node);
      continue;
    }
    uint64_t rows = static_cast<uint64_t>(s.rows);
    void* args[2] = {&vt, &rows};
    be_.launch(s.kernel, s.grid, s.block, args);
  }
}

std::string FusedProgram::launch_summary(size_t optimizer_launches) const {
  const std::string opt = std::to_string(optimizer_launches);
  return "fused: " + std::to_string(forward_launches()) + " forward + " + std::to_string(backward_launches()) + " backward + " +
         opt + " optimizer launches per episode (per-node " + std::to_string(plan_.per_node_launches()) + " + " + opt + ")";
}

void FusedProgram::forward() { run(fwd_, true); }
void FusedProgram::backward() { run(bwd_, false); }

void FusedProgram::capture_episode(replay::DeviceOptimizer* opt) {
  episode_id_ = 0;
  be_.begin_capture();
  try {
    run(fwd_, true);
    run(bwd_, false);
    if (opt) opt->run_launches();
  } catch (...) {
    be_.abort_capture();  // not end_capture: its CAPTURE_INVALIDATED would replace this error
    throw;
  }
  be_.end_capture();
  episode_id_ = be_.capture_id();
  episode_opt_ = opt;
}

void FusedProgram::run_episode(replay::DeviceOptimizer* opt) {
  if (episode_id_ == 0 || !be_.has_capture()) throw Error("fuse: run_episode: no captured episode (call capture_episode first)");
  if (be_.capture_id() != episode_id_)
    throw Error("fuse: run_episode: the backend's episode was captured by another program since (call capture_episode again)");
  if (opt != episode_opt_) throw Error("fuse: run_episode: the episode was captured with a different optimizer (or none)");
  if (opt) opt->prepare();
  be_.replay();
}

}  // namespace gr::fuse
