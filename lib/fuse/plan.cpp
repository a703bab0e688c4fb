// plan.cpp — the fusion planner (docs/fusion.md): row / serial segment classification, the
// backward order-safety check, kernel naming and the plan id, launch counts and Plan::describe.
#include <algorithm>
#include <cstdio>

#include "fuse/detail.h"

namespace gr::fuse {

using namespace detail;

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

// ---- order safety ------------------------------------------------------------------------------------
// Proves that a row segment's fused backward (row-space kernel, then parameter-space kernel) gives every
// gradient slot the bits of the per-node backward, or says why not. The per-node backward walks nodes
// in descending id and adds each node's contributions a-side first, then b-side; a slot's bits depend
// only on the order of its contributions, and a contribution's bits only on complete inputs. So:
//   1. every slot the fused kernels read (g[k] of a stage, g[consumer] of a parameter job) has received
//      all its contributions from this segment before the read, and
//   2. every slot receives its contributions in the per-node order (the same consumer sequence).
// The events are replayed in the order the generated kernels run them; row-space writes of row s come
// only from row s's stages, so the per-row order is the kernel's stage order.
std::string prove_order(const Analyzer& an, const Segment& seg, const BwdSplit& sp) {
  std::map<int32_t, std::vector<int32_t>> fused_seq, per_node_seq;  // slot -> consumers, in write order
  std::map<int32_t, int64_t> last_write, first_read;                 // slot -> event time
  int64_t time = 0;
  auto write = [&](int32_t slot, int32_t consumer) {
    fused_seq[slot].push_back(consumer);
    last_write[slot] = time;
  };
  auto read = [&](int32_t slot) {
    if (!first_read.count(slot)) first_read[slot] = time;
  };
  // Consumers of this segment's backward in per-node order: the head (highest id), then the nodes.
  std::vector<int32_t> consumers;
  if (seg.head >= 0 && an.active(seg.head)) consumers.push_back(seg.head);
  for (auto it = seg.nodes.rbegin(); it != seg.nodes.rend(); ++it)
    if (an.active(*it)) consumers.push_back(*it);
  for (int32_t k : consumers) {
    const NodeView& y = an.n(k);
    if (an.active(y.a)) per_node_seq[y.a].push_back(k);
    if (y.b >= 0 && an.active(y.b)) per_node_seq[y.b].push_back(k);
  }
  // The row kernel: one stage per consumer, descending; each stage reads its own gradient and adds the
  // row-space contributions (a-side first, then a [B, C] b-side).
  for (int32_t k : consumers) {
    ++time;
    read(k);
    const NodeView& y = an.n(k);
    const bool row_b = k == seg.head || (is_binary(y.op) && an.bside(k) == BSide::Row);
    if (an.active(y.a) && sp.row_targets.count(y.a)) write(y.a, k);
    if (row_b && y.b >= 0 && an.active(y.b) && sp.row_targets.count(y.b)) write(y.b, k);
  }
  // The parameter kernel: one stage per target, its jobs in their listed order.
  for (int32_t t : sp.param_order)
    for (const Job& j : sp.param.at(t)) {
      ++time;
      read(j.consumer);
      write(t, j.consumer);
    }
  for (const auto& [slot, t_read] : first_read) {
    auto w = last_write.find(slot);
    if (w != last_write.end() && w->second >= t_read)
      return "order safety: the gradient of node " + std::to_string(slot) +
             " is read by the fused backward before its parameter-space contributions are added (a computed "
             "broadcast b-side inside the segment)";
  }
  for (const auto& [slot, seq] : per_node_seq)
    if (fused_seq[slot] != seq)
      return "order safety: the gradient of node " + std::to_string(slot) +
             " would receive its contributions in another order than the per-node backward";
  for (const auto& [slot, seq] : fused_seq)
    if (!per_node_seq.count(slot)) return "order safety: the fused backward writes node " + std::to_string(slot) + " unexpectedly";
  // The forward: with several row blocks, a node may read another computing node of the segment only in
  // its own row (another row is another block, with no barrier between blocks).
  if (seg.rows > 1)
    for (int32_t k : seg.nodes) {
      const NodeView& y = an.n(k);
      if (!is_binary(y.op) || an.bside(k) == BSide::Row) continue;
      if (std::binary_search(seg.nodes.begin(), seg.nodes.end(), y.b))
        return "order safety: node " + std::to_string(k) + " broadcasts node " + std::to_string(y.b) +
               ", computed by other blocks of the same kernel";
    }
  return "";
}

}  // namespace

// ---- the planner ------------------------------------------------------------------------------------
Plan plan(const replay::Program& prog, PlanOptions options) {
  Analyzer an(prog, options);
  Plan pl;
  pl.dtype = prog.dtype();
  pl.nodes = prog.size();
  const int32_t n = prog.size();

  // Row segments: maximal consecutive runs of row-local nodes over one B (leaves may sit inside).
  std::vector<char> used(static_cast<size_t>(n), 0);
  if (options.row) {
    int32_t id = 0;
    while (id < n) {
      const int64_t B = is_leaf(an.n(id).op) ? 0 : an.row_local(id);
      if (B == 0) {
        ++id;
        continue;
      }
      Segment seg;
      seg.kind = SegKind::Row;
      seg.rows = B;
      seg.lo = id;
      int32_t j = id;
      for (; j < n; ++j) {
        if (is_leaf(an.n(j).op)) continue;
        if (an.row_local(j) != B) break;
        seg.nodes.push_back(j);
        seg.hi = j;
      }
      id = j;
      if (seg.nodes.size() >= 2) {
        for (int32_t k = seg.lo; k <= seg.hi; ++k) used[static_cast<size_t>(k)] = 1;
        pl.segments.push_back(std::move(seg));
      }
    }
  }
  // Serial segments: maximal consecutive runs of single-thread-friendly nodes (the scalar tail).
  if (options.serial) {
    int32_t id = 0;
    while (id < n) {
      if (used[static_cast<size_t>(id)] || is_leaf(an.n(id).op) || !an.serial_ok(id)) {
        ++id;
        continue;
      }
      Segment seg;
      seg.kind = SegKind::Serial;
      seg.rows = 1;
      seg.lo = id;
      int32_t j = id;
      for (; j < n; ++j) {
        if (used[static_cast<size_t>(j)]) break;
        if (is_leaf(an.n(j).op)) continue;
        if (!an.serial_ok(j)) break;
        seg.nodes.push_back(j);
        seg.hi = j;
      }
      id = j;
      if (seg.nodes.size() >= 2) {
        for (int32_t k = seg.lo; k <= seg.hi; ++k) used[static_cast<size_t>(k)] = 1;
        pl.segments.push_back(std::move(seg));
      }
    }
  }
  std::sort(pl.segments.begin(), pl.segments.end(), [](const Segment& a, const Segment& b) { return a.lo < b.lo; });
  if (options.lanes)
    for (Segment& seg : pl.segments) {
      if (seg.kind != SegKind::Row) continue;
      int32_t h = seg.hi + 1;
      while (h < n && is_leaf(an.n(h).op)) ++h;
      if (h >= n || used[static_cast<size_t>(h)]) continue;
      const NodeView& hv = an.n(h);
      const Shape& sx = an.n(hv.a).shape;
      // Its input as the segment's flattened rows (sce's per-node kernels take [N, C] only: rank 2).
      const bool rows_ok = Analyzer::flat_ok(sx) && Analyzer::rows(sx) == seg.rows &&
                           (serial_stage(hv.op) != Stage::Sce || sx.rank() == 2);
      if (an.row_head(h) && rows_ok) seg.head = h;
    }

  // Kernels.
  Gen g;
  g.N = n;
  for (size_t i = 0; i < pl.segments.size(); ++i) {
    Segment& seg = pl.segments[i];
    const std::string base = "grf_@ID@_" + std::string(seg.kind == SegKind::Row ? "r" : "s") + std::to_string(i);
    for (int32_t k : seg.nodes) {
      seg.fwd_per_node += prog.node_forward_launches(k);
      seg.bwd_per_node += prog.node_backward_launches(k);
    }
    if (seg.head >= 0) seg.bwd_per_node += prog.node_backward_launches(seg.head);
    seg.fwd = base + "_fwd";
    if (seg.kind == SegKind::Row) {
      gen_row_fwd(an, g, seg, seg.fwd);
      const BwdSplit sp = split_bwd(an, seg);
      std::vector<int32_t> both;
      for (const auto& [t, jobs] : sp.param)
        if (sp.row_targets.count(t)) both.push_back(t);
      std::string unsafe = prove_order(an, seg, sp);
      if (!both.empty()) {
        seg.bwd_why = "order safety: the gradient of node " + std::to_string(both.front()) +
                      " collects both row-space and parameter-space contributions";
      } else if (!unsafe.empty()) {
        seg.bwd_why = std::move(unsafe);
      } else if (!sp.row_work && sp.param.empty()) {
        seg.bwd_why = "no backward work";
      } else {
        seg.bwd_fused = true;
        if (sp.row_work) {
          seg.bwd_row = base + "_bwr";
          gen_row_bwd(an, g, seg, seg.bwd_row);
        }
        if (!sp.param.empty()) {
          seg.bwd_param = base + "_bwp";
          seg.param_width = gen_param_bwd(an, g, sp, seg.bwd_param);
        }
      }
    } else {
      gen_serial_fwd(an, g, seg, seg.fwd);
      seg.bwd_row = base + "_bwd";
      if (gen_serial_bwd(an, g, seg, seg.bwd_row)) {
        seg.bwd_fused = true;
      } else {
        seg.bwd_row.clear();
        seg.bwd_why = "no backward work";
      }
    }
  }
  // The one-launch zero fill of every gradient, with the loss seed (gr_accumulate(0, 1) == 1).
  const int32_t loss = prog.loss_var().id;
  pl.fill_width = prog.grad_elements();
  if (pl.fill_width > 0) {
    pl.fill = "grf_@ID@_fill";
    const int64_t s0 = an.active(loss) ? static_cast<int64_t>((prog.grad_address(loss) - prog.grad_slab().handle) /
                                                              (pl.dtype == DType::F32 ? 4 : 8))
                                       : 0;
    const int64_t s1 = an.active(loss) ? an.n(loss).numel : 0;
    g.open(pl.fill);
    g.line("  gr_real* gs = (gr_real*)(unsigned long long)vt[" + std::to_string(2 * n) + "];");
    g.line("  GRK_LOOP(e, " + L(pl.fill_width) + ") gs[e] = (e >= " + L(s0) + " && e < " + L(s0 + s1) +
           ") ? (gr_real)1 : (gr_real)0;");
    g.close(pl.fill);
  }
  std::string gen = g.out;
  pl.id = fnv1a(gen + (pl.dtype == DType::F32 ? "|f32" : "|f64"));
  char idbuf[32];
  std::snprintf(idbuf, sizeof idbuf, "%012llx", static_cast<unsigned long long>(pl.id & 0xffffffffffffULL));
  const std::string ids = idbuf;
  replace_all(gen, "@ID@", ids);
  replace_all(pl.fill, "@ID@", ids);
  for (Segment& seg : pl.segments)
    for (std::string* s : {&seg.fwd, &seg.bwd_row, &seg.bwd_param}) replace_all(*s, "@ID@", ids);
  pl.generated = "\n// ---- generated by lib/fuse (plan " + ids + ") ----\n" + gen;
  // The prelude and the generated kernels only: nodes outside the segments launch from the
  // Program's per-node module, so the fused module needs none of its kernels (a tenth of the text
  // NVRTC compiles; the shared functions the generated code calls are inline in the headers).
  pl.source = replay::kernel_prelude(pl.dtype) + pl.generated;
  pl.module_name = "gr_fuse_" + ids;

  for (int32_t id = 0; id < n; ++id)
    if (op_info(an.n(id).op).window()) pl.per_node_windows.emplace_back(id, an.n(id).op);
  for (int32_t id = 0; id < n; ++id)
    if (an.n(id).op == Op::Embedding) pl.per_node_gathers.push_back(id);

  // Launch counts.
  pl.fwd_per_node = prog.forward_launches();
  pl.bwd_per_node = prog.backward_launches();
  size_t ff = pl.fwd_per_node, bf = pl.bwd_per_node;
  for (const Segment& seg : pl.segments) {
    ff = ff - seg.fwd_per_node + 1;
    if (seg.bwd_fused) bf = bf - seg.bwd_per_node + (seg.bwd_row.empty() ? 0 : 1) + (seg.bwd_param.empty() ? 0 : 1);
  }
  // Per-node: fill + seed (seed only when the loss is active); fused: one launch.
  size_t pre = 0;
  if (pl.fill_width > 0) pre = an.active(loss) ? 2 : 1;
  if (pre > 0) bf = bf - pre + 1;
  pl.fwd_fused = ff;
  pl.bwd_fused = bf;
  return pl;
}

std::string Plan::describe() const {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "fusion plan %012llx (%s): %zu segment(s)\n", static_cast<unsigned long long>(id & 0xffffffffffffULL),
                dtype == DType::F32 ? "f32" : "f64", segments.size());
  s += buf;
  for (const Segment& seg : segments) {
    std::string ops;
    for (int32_t k : seg.nodes) ops += (ops.empty() ? "" : " ") + std::to_string(k);
    std::snprintf(buf, sizeof buf, "  %s nodes %d..%d (%zu computing%s): forward 1 launch (per-node %zu); ",
                  seg.kind == SegKind::Row ? "row segment" : "serial segment", seg.lo, seg.hi, seg.nodes.size(),
                  seg.kind == SegKind::Row ? (", B = " + std::to_string(seg.rows)).c_str() : "", seg.fwd_per_node);
    s += buf;
    if (seg.bwd_fused) {
      const size_t l = (seg.bwd_row.empty() ? 0 : 1) + (seg.bwd_param.empty() ? 0 : 1);
      std::snprintf(buf, sizeof buf, "backward %zu launch(es)%s (per-node %zu)\n", l,
                    seg.kind == SegKind::Row ? (seg.bwd_param.empty() ? " [row]" : seg.bwd_row.empty() ? " [param]" : " [row + param]") : " [serial]",
                    seg.bwd_per_node);
      s += buf;
    } else {
      s += "backward per-node (" + seg.bwd_why + ")\n";
    }
    s += "    nodes: " + ops;
    if (seg.head >= 0) s += "; backward head: node " + std::to_string(seg.head);
    s += "\n";
  }
  if (!per_node_windows.empty()) {
    s += "  per-node window ops (Fusion Opaque, never fused; their kernels launch between the segments):";
    for (const auto& [node, op] : per_node_windows) s += " " + std::to_string(node) + " " + std::string(op_name(op));
    s += "\n";
  }
  if (!per_node_gathers.empty()) {
    s += "  per-node embedding gathers (Fusion Opaque, never fused; grk_embedding_fwd / _bwd_b launch between the segments):";
    for (const int32_t node : per_node_gathers) s += " " + std::to_string(node);
    s += "\n";
  }
  std::snprintf(buf, sizeof buf,
                "  launches: forward %zu -> %zu, backward %zu -> %zu (zero-fill and seed: one launch), total %zu -> %zu\n",
                fwd_per_node, fwd_fused, bwd_per_node, bwd_fused, per_node_launches(), fused_launches());
  s += buf;
  return s;
}

Plan plan_tape(device::Backend& backend, const Tape& tape, Var loss, replay::ReplayOptions replay_options,
               PlanOptions options) {
  const replay::Program prog(backend, tape, loss, replay_options);
  return plan(prog, options);
}

bool worthwhile(const Plan& plan, const device::Backend& backend) {
  return backend.capabilities().real_gpu && plan.fuses() && plan.fused_launches() < plan.per_node_launches();
}

}  // namespace gr::fuse
