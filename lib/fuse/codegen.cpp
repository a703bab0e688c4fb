// codegen.cpp — the fused kernel generator (docs/fusion.md): row-segment forward / row-space backward /
// parameter-space backward kernels and serial-segment kernels, as CUDA text appended to the replay
// kernel source.
//
// Bit-exactness: every fused element is computed by one thread with the same shared functions the
// per-node kernels call (each elementwise op's row functions gr_<stem>_*, rendered by
// lib/grad/op_render.h; gr_accumulate; the lane functions, all from replay::kernel_prelude(dtype), which the
// generated text is appended to) and with the same accumulation orders (gr_dot / gr_sum of kernels/gr_reduce.h: matmul over k,
// dW over rows then added,
// broadcast b-side walks adding straight into the slot in ascending output order). Gradient slots
// receive their contributions in the per-node order (descending node id, a-side before b-side):
// row-space contributions in the row kernel's descending stages, parameter-space ones after it, and
// a segment where one slot would get both kinds keeps its per-node backward (order safety).
#include <algorithm>
#include <bit>
#include <cstdio>

#include "fuse/detail.h"
#include "grad/op_render.h"

namespace gr::fuse::detail {

namespace {

// An elementwise op's call text from its row (lib/grad/op_render.h), over kernel operands.
std::string call(Op op, CallSide side, std::string g, std::string a, std::string b, std::string y, std::string s) {
  return render_call(op, side, Operands{std::move(g), std::move(a), std::move(b), std::move(y), std::move(s)});
}

// The exact double, whatever it is (NaN payloads and -0 included), as a kernel expression.
std::string lit(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "__longlong_as_double((long long)0x%016llxULL)",
                static_cast<unsigned long long>(std::bit_cast<uint64_t>(d)));
  return buf;
}

// The b-side element a row-stage thread reads: its own row's, its column's, or the single element.
std::string bside_operand(const Gen& g, int32_t b, BSide side, const std::string& row) {
  switch (side) {
    case BSide::Row: return g.V(b) + "[" + row + "]";
    case BSide::Col: return g.V(b) + "[c]";
    case BSide::Scal:
    case BSide::None: break;  // None never reaches a row stage (row_local refuses it)
  }
  return g.V(b) + "[0]";
}

[[noreturn]] void no_stage(const NodeView& y, const char* where) {
  throw Error("fuse: " + std::string(op_name(y.op)) + " cannot be a stage of a " + where + " (the planner placed it there)");
}

// gr_<stem>_<part>: a lane or row op's lane function, named from its row.
std::string lane_fn(Op op, const char* part) { return "gr_" + std::string(op_info(op).stem) + "_lane_" + part; }

// A causal lane's visible length for flattened row s: the per-node kernels' gr_causal_visible(lane, Tq,
// Tk), whose lane index is the flattened row index (lanes run over [..., Tq] row-major, as rows do).
std::string causal_vis(const NodeView& y) {
  const int64_t r = static_cast<int64_t>(y.shape.rank());
  return "gr_causal_visible(s, " + L(y.shape[r - 2]) + ", " + L(y.shape[r - 1]) + ")";
}

std::string col_loop(int64_t W) {
  return "    for (long long c = threadIdx.x; c < " + L(W) + "; c += blockDim.x) {";
}

}  // namespace

// ---- row segments: forward ----------------------------------------------------------------------------
void gen_row_fwd(const Analyzer& an, Gen& g, const Segment& seg, const std::string& name) {
  std::set<int32_t> vs;
  for (int32_t k : seg.nodes) {
    const NodeView& y = an.n(k);
    vs.insert(k);
    vs.insert(y.a);
    if (y.b >= 0) vs.insert(y.b);
  }
  g.open(name);
  g.decls(vs, {});
  g.line("  for (long long s = blockIdx.x; s < B; s += gridDim.x) {");
  for (size_t i = 0; i < seg.nodes.size(); ++i) {
    const int32_t k = seg.nodes[i];
    const NodeView& y = an.n(k);
    const int64_t C = Analyzer::cols(y.shape);
    const std::string row = "s * " + L(C) + " + c";
    g.line("    // node " + std::to_string(k) + ": " + std::string(op_name(y.op)) + " " + y.shape.str());
    switch (row_stage(y.op)) {
      case Stage::Binary: {
        const std::string b = bside_operand(g, y.b, an.bside(k), row);
        g.line(col_loop(C));
        g.line("      " + g.V(k) + "[" + row + "] = " + call(y.op, CallSide::Fwd, "", g.V(y.a) + "[" + row + "]", b, "", "") + ";");
        g.line("    }");
        break;
      }
      case Stage::Unary:
        g.line(col_loop(C));
        g.line("      " + g.V(k) + "[" + row + "] = " +
               call(y.op, CallSide::Fwd, "", g.V(y.a) + "[" + row + "]", "", "", "GRK_REAL(" + lit(y.scalar) + ")") + ";");
        g.line("    }");
        break;
      case Stage::Matmul: {
        const int64_t K = Analyzer::cols(an.n(y.a).shape);
        g.line(col_loop(C));
        g.line("      " + g.V(k) + "[" + row + "] = gr_dot(" + g.V(y.a) + " + s * " + L(K) + ", 1LL, " + g.V(y.b) + " + c, " + L(C) +
               ", " + L(K) + ");");
        g.line("    }");
        break;
      }
      case Stage::Row:  // one thread per row, as the per-node kernel; eps in the node's scalar
        g.line("    if (threadIdx.x == 0) " + lane_fn(y.op, "fwd") + "(" + g.V(y.a) + " + s * " + L(C) + ", " + g.V(k) + " + s * " +
               L(C) + ", " + L(C) + ", 1LL, GRK_REAL(" + lit(y.scalar) + "));");
        break;
      case Stage::Lane:  // softmax / log_softmax over the last axis: one thread per lane (= row), as the per-node kernel
        if (y.causal) {  // grk_softmax_causal_fwd's lane s: query row s mod Tq sees its visible prefix
          g.line("    if (threadIdx.x == 0) gr_softmax_causal_lane_fwd(" + g.V(y.a) + " + s * " + L(C) + ", " + g.V(k) + " + s * " +
                 L(C) + ", " + L(C) + ", 1LL, " + causal_vis(y) + ");");
          break;
        }
        g.line("    if (threadIdx.x == 0) " + lane_fn(y.op, "fwd") + "(" + g.V(y.a) + " + s * " + L(C) + ", " + g.V(k) + " + s * " +
               L(C) + ", " + L(C) + ", 1LL);");
        break;
      case Stage::Copy:
      case Stage::SumAll:
      case Stage::Sce:
      case Stage::None: no_stage(y, "row segment");
    }
    if (i + 1 < seg.nodes.size()) g.line("    __syncthreads();");
  }
  g.line("  }");
  g.close(name);
}


BwdSplit split_bwd(const Analyzer& an, const Segment& seg) {
  BwdSplit sp;
  if (seg.head >= 0 && an.active(seg.head)) {
    const NodeView& h = an.n(seg.head);
    for (int32_t t : {h.a, h.b})
      if (t >= 0 && an.active(t)) {
        sp.row_targets.insert(t);
        sp.row_work = true;
      }
  }
  for (auto it = seg.nodes.rbegin(); it != seg.nodes.rend(); ++it) {
    const int32_t k = *it;
    if (!an.active(k)) continue;
    const NodeView& y = an.n(k);
    auto row = [&](int32_t t) {
      if (an.active(t)) {
        sp.row_targets.insert(t);
        sp.row_work = true;
      }
    };
    auto par = [&](int32_t t, int kind) {
      if (!an.active(t)) return;
      if (!sp.param.count(t)) sp.param_order.push_back(t);
      sp.param[t].push_back({k, kind});
    };
    switch (row_stage(y.op)) {
      case Stage::Binary: {
        row(y.a);
        const BSide bs = an.bside(k);
        if (bs == BSide::Row) row(y.b);
        else par(y.b, bs == BSide::Col ? 1 : 2);
        break;
      }
      case Stage::Matmul:
        row(y.a);
        par(y.b, 0);
        break;
      case Stage::Unary:
      case Stage::Lane:
      case Stage::Row: row(y.a); break;
      case Stage::Copy:
      case Stage::SumAll:
      case Stage::Sce:
      case Stage::None: no_stage(y, "row segment");
    }
  }
  return sp;
}

void gen_row_bwd(const Analyzer& an, Gen& g, const Segment& seg, const std::string& name) {
  std::set<int32_t> vs, gs;
  for (int32_t k : seg.nodes) {
    const NodeView& y = an.n(k);
    if (!an.active(k)) continue;
    vs.insert(k);
    vs.insert(y.a);
    if (y.b >= 0) vs.insert(y.b);
    gs.insert(k);
    if (an.active(y.a)) gs.insert(y.a);
    if (y.b >= 0 && an.active(y.b)) gs.insert(y.b);
  }
  const bool head = seg.head >= 0 && an.active(seg.head) &&
                    (an.active(an.n(seg.head).a) || (an.n(seg.head).b >= 0 && an.active(an.n(seg.head).b)));
  if (head) {
    const NodeView& h = an.n(seg.head);
    vs.insert(h.a);
    if (h.b >= 0) vs.insert(h.b);
    gs.insert(seg.head);
    if (an.active(h.a)) gs.insert(h.a);
    if (h.b >= 0 && an.active(h.b)) gs.insert(h.b);
  }
  g.open(name);
  g.decls(vs, gs);
  g.line("  for (long long s = blockIdx.x; s < B; s += gridDim.x) {");
  bool first = true;
  if (head) {
    const NodeView& h = an.n(seg.head);
    const Shape& sx = an.n(h.a).shape;  // flattened [rows, C] (sce: rank 2)
    const std::string C = L(Analyzer::cols(sx));
    g.line("    // node " + std::to_string(seg.head) + ": " + std::string(op_name(h.op)) + " (segment head)");
    switch (serial_stage(h.op)) {
      case Stage::Sce:  // the per-node sce backward: one thread per row
        g.line("    if (threadIdx.x == 0) {");
        g.line("      const gr_real q = GRK_DIV(" + g.G(seg.head) + "[0], (gr_real)" + L(Analyzer::rows(sx)) + ");");
        g.line("      gr_sce_row_bwd(" + g.V(h.a) + " + s * " + C + ", " + g.V(h.b) + " + s * " + C + ", q, " +
               (an.active(h.a) ? g.G(h.a) + " + s * " + C : std::string("(gr_real*)0")) + ", " +
               (an.active(h.b) ? g.G(h.b) + " + s * " + C : std::string("(gr_real*)0")) + ", " + C + ");");
        g.line("    }");
        break;
      case Stage::SumAll: {  // sum / mean over all axes (the per-node sum_all backward)
        const int64_t n = sx.numel();
        g.line(col_loop(Analyzer::cols(sx)));
        g.line("      const gr_real gi = " +
               (h.op == Op::Mean ? "GRK_DIV(" + g.G(seg.head) + "[0], (gr_real)" + L(n) + ")" : g.G(seg.head) + "[0]") + ";");
        g.line("      " + g.G(h.a) + "[s * " + C + " + c] = gr_accumulate(" + g.G(h.a) + "[s * " + C + " + c], gi);");
        g.line("    }");
        break;
      }
      case Stage::Unary:
      case Stage::Binary:
      case Stage::Matmul:
      case Stage::Lane:
      case Stage::Row:
      case Stage::Copy:
      case Stage::None: no_stage(h, "row segment's head");
    }
    first = false;
  }
  for (auto it = seg.nodes.rbegin(); it != seg.nodes.rend(); ++it) {
    const int32_t k = *it;
    if (!an.active(k)) continue;
    const NodeView& y = an.n(k);
    const int64_t C = Analyzer::cols(y.shape);
    const std::string row = "s * " + L(C) + " + c";
    std::string body;
    auto acc_into = [&](const std::string& slot, const std::string& contrib) {
      body += "      " + slot + " = gr_accumulate(" + slot + ", " + contrib + ");\n";
    };
    switch (row_stage(y.op)) {
      case Stage::Binary: {
        const BSide bs = an.bside(k);
        const std::string b = bside_operand(g, y.b, bs, row);
        const Operands o{g.G(k) + "[" + row + "]", g.V(y.a) + "[" + row + "]", b, g.V(k) + "[" + row + "]", ""};
        if (an.active(y.a)) acc_into(g.G(y.a) + "[" + row + "]", render_call(y.op, CallSide::A, o));
        if (bs == BSide::Row && an.active(y.b)) acc_into(g.G(y.b) + "[" + row + "]", render_call(y.op, CallSide::B, o));
        if (body.empty()) continue;
        body = col_loop(C) + "\n" + body + "    }";
        break;
      }
      case Stage::Unary:
        if (!an.active(y.a)) continue;
        acc_into(g.G(y.a) + "[" + row + "]", call(y.op, CallSide::A, g.G(k) + "[" + row + "]", g.V(y.a) + "[" + row + "]", "",
                                                  g.V(k) + "[" + row + "]", "GRK_REAL(" + lit(y.scalar) + ")"));
        body = col_loop(C) + "\n" + body + "    }";
        break;
      case Stage::Matmul: {
        if (!an.active(y.a)) continue;
        const int64_t K = Analyzer::cols(an.n(y.a).shape);
        body = col_loop(K) + "\n";  // c = k of dA[s, k]
        body += "      " + g.G(y.a) + "[s * " + L(K) + " + c] = GRK_ADD(" + g.G(y.a) + "[s * " + L(K) + " + c], gr_dot(" + g.G(k) +
                " + s * " + L(C) + ", 1LL, " + g.V(y.b) + " + c * " + L(C) + ", 1LL, " + L(C) + "));\n";
        body += "    }";
        break;
      }
      case Stage::Row:
        if (!an.active(y.a)) continue;
        body = "    if (threadIdx.x == 0) " + lane_fn(y.op, "bwd") + "(" + g.G(k) + " + s * " + L(C) + ", " + g.V(y.a) + " + s * " +
               L(C) + ", " + g.V(k) + " + s * " + L(C) + ", " + g.G(y.a) + " + s * " + L(C) + ", " + L(C) + ", 1LL, GRK_REAL(" +
               lit(y.scalar) + "));";
        break;
      case Stage::Lane:  // softmax / log_softmax lane
        if (!an.active(y.a)) continue;
        if (y.causal) {  // grk_softmax_causal_bwd's lane s
          body = "    if (threadIdx.x == 0) gr_softmax_causal_lane_bwd(" + g.G(k) + " + s * " + L(C) + ", " + g.V(k) + " + s * " +
                 L(C) + ", " + g.G(y.a) + " + s * " + L(C) + ", " + L(C) + ", 1LL, " + causal_vis(y) + ");";
          break;
        }
        body = "    if (threadIdx.x == 0) " + lane_fn(y.op, "bwd") + "(" + g.G(k) + " + s * " + L(C) + ", " + g.V(k) + " + s * " +
               L(C) + ", " + g.G(y.a) + " + s * " + L(C) + ", " + L(C) + ", 1LL);";
        break;
      case Stage::Copy:
      case Stage::SumAll:
      case Stage::Sce:
      case Stage::None: no_stage(y, "row segment");
    }
    if (!first) g.line("    __syncthreads();");
    first = false;
    g.line("    // node " + std::to_string(k) + ": " + std::string(op_name(y.op)) + " " + y.shape.str());
    g.line(body);
  }
  g.line("  }");
  g.close(name);
}

// One grid-stride stage per target; inside, the target's jobs serially in descending consumer order.
int64_t gen_param_bwd(const Analyzer& an, Gen& g, const BwdSplit& sp, const std::string& name) {
  std::set<int32_t> vs, gs;
  int64_t widest = 0;
  for (int32_t t : sp.param_order) {
    gs.insert(t);
    widest = std::max(widest, an.n(t).numel);
    for (const Job& j : sp.param.at(t)) {
      const NodeView& y = an.n(j.consumer);
      vs.insert(j.consumer);
      vs.insert(y.a);
      vs.insert(y.b);
      gs.insert(j.consumer);
    }
  }
  g.open(name);
  g.decls(vs, gs);
  for (int32_t t : sp.param_order) {
    g.line("  // gradient of node " + std::to_string(t) + " " + an.n(t).shape.str());
    g.line("  GRK_LOOP(i, " + L(an.n(t).numel) + ") {");
    for (const Job& j : sp.param.at(t)) {
      const int32_t k = j.consumer;
      const NodeView& y = an.n(k);
      const int64_t C = Analyzer::cols(y.shape);
      if (j.kind == 0) {  // dW[kk, c] = dW + Σ_{r asc} A[r, kk]·g[r, c]  (grk_bmm_bwd_b_impl)
        const int64_t K = Analyzer::cols(an.n(y.a).shape);
        g.line("    {  // matmul node " + std::to_string(k));
        g.line("      const long long kk = i / " + L(C) + ", c = i - kk * " + L(C) + ";");
        g.line("      " + g.G(t) + "[i] = GRK_ADD(" + g.G(t) + "[i], gr_dot(" + g.V(y.a) + " + kk, " + L(K) + ", " + g.G(k) + " + c, " +
               L(C) + ", B));");
        g.line("    }");
      } else if (j.kind == 1) {  // b-side [C]: output rows ascending (the broadcast walk)
        g.line("    for (long long r = 0; r < B; ++r)  // " + std::string(op_name(y.op)) + " node " + std::to_string(k));
        g.line("      " + g.G(t) + "[i] = gr_accumulate(" + g.G(t) + "[i], " +
               call(y.op, CallSide::B, g.G(k) + "[r * " + L(C) + " + i]", g.V(y.a) + "[r * " + L(C) + " + i]", g.V(y.b) + "[i]",
                    g.V(k) + "[r * " + L(C) + " + i]", "") +
               ");");
      } else {  // b-side scalar: every output element ascending
        g.line("    for (long long e = 0; e < B * " + L(C) + "; ++e)  // " + std::string(op_name(y.op)) + " node " +
               std::to_string(k));
        g.line("      " + g.G(t) + "[i] = gr_accumulate(" + g.G(t) + "[i], " +
               call(y.op, CallSide::B, g.G(k) + "[e]", g.V(y.a) + "[e]", g.V(y.b) + "[0]", g.V(k) + "[e]", "") + ");");
      }
    }
    g.line("  }");
  }
  g.close(name);
  return widest;
}

// ---- serial segments ----------------------------------------------------------------------------------
void gen_serial_fwd(const Analyzer& an, Gen& g, const Segment& seg, const std::string& name) {
  std::set<int32_t> vs;
  for (int32_t k : seg.nodes) {
    vs.insert(k);
    vs.insert(an.n(k).a);
    if (an.n(k).b >= 0) vs.insert(an.n(k).b);
  }
  g.open(name);
  g.line("  if (!GRK_FIRST_THREAD) return;");
  g.decls(vs, {});
  for (int32_t k : seg.nodes) {
    const NodeView& y = an.n(k);
    g.line("  // node " + std::to_string(k) + ": " + std::string(op_name(y.op)) + " " + y.shape.str());
    switch (serial_stage(y.op)) {
      case Stage::Binary:
        g.line("  " + g.V(k) + "[0] = " + call(y.op, CallSide::Fwd, "", g.V(y.a) + "[0]", g.V(y.b) + "[0]", "", "") + ";");
        break;
      case Stage::Unary:
        g.line("  " + g.V(k) + "[0] = " + call(y.op, CallSide::Fwd, "", g.V(y.a) + "[0]", "", "", "GRK_REAL(" + lit(y.scalar) + ")") +
               ";");
        break;
      case Stage::Copy: g.line("  " + g.V(k) + "[0] = " + g.V(y.a) + "[0];"); break;
      case Stage::SumAll: {
        const int64_t n = an.n(y.a).numel;
        const std::string acc = "gr_sum(" + g.V(y.a) + ", " + L(n) + ", 1LL)";
        g.line("  " + g.V(k) + "[0] = " + (y.op == Op::Mean ? "GRK_DIV(" + acc + ", (gr_real)" + L(n) + ")" : acc) + ";");
        break;
      }
      case Stage::Sce: {  // softmax cross-entropy (the per-node sce forward)
        const Shape& sx = an.n(y.a).shape;
        g.line("  {");
        g.line("    gr_real total = 0;");
        g.line("    for (long long r = 0; r < " + L(sx[0]) + "; ++r) total = GRK_ADD(total, gr_sce_row_fwd(" + g.V(y.a) + " + r * " +
               L(sx[1]) + ", " + g.V(y.b) + " + r * " + L(sx[1]) + ", " + L(sx[1]) + "));");
        g.line("    " + g.V(k) + "[0] = gr_sce_finish(total, " + L(sx[0]) + ");");
        g.line("  }");
        break;
      }
      case Stage::Matmul:
      case Stage::Lane:
      case Stage::Row:
      case Stage::None: no_stage(y, "serial segment");
    }
  }
  g.close(name);
}

// Returns false when the segment has no backward work.
bool gen_serial_bwd(const Analyzer& an, Gen& g, const Segment& seg, const std::string& name) {
  std::set<int32_t> vs, gs;
  bool any = false;
  for (int32_t k : seg.nodes) {
    const NodeView& y = an.n(k);
    if (!an.active(k)) continue;
    if (!an.active(y.a) && !(y.b >= 0 && an.active(y.b))) continue;
    any = true;
    vs.insert(k);
    vs.insert(y.a);
    if (y.b >= 0) vs.insert(y.b);
    gs.insert(k);
    if (an.active(y.a)) gs.insert(y.a);
    if (y.b >= 0 && an.active(y.b)) gs.insert(y.b);
  }
  if (!any) return false;
  g.open(name);
  g.line("  if (!GRK_FIRST_THREAD) return;");
  g.decls(vs, gs);
  for (auto it = seg.nodes.rbegin(); it != seg.nodes.rend(); ++it) {
    const int32_t k = *it;
    const NodeView& y = an.n(k);
    if (!an.active(k)) continue;
    g.line("  // node " + std::to_string(k) + ": " + std::string(op_name(y.op)) + " " + y.shape.str());
    switch (serial_stage(y.op)) {
      case Stage::Binary: {
        const Operands o{g.G(k) + "[0]", g.V(y.a) + "[0]", g.V(y.b) + "[0]", g.V(k) + "[0]", ""};
        if (an.active(y.a))
          g.line("  " + g.G(y.a) + "[0] = gr_accumulate(" + g.G(y.a) + "[0], " + render_call(y.op, CallSide::A, o) + ");");
        if (an.active(y.b))
          g.line("  " + g.G(y.b) + "[0] = gr_accumulate(" + g.G(y.b) + "[0], " + render_call(y.op, CallSide::B, o) + ");");
        break;
      }
      case Stage::Unary:
        if (!an.active(y.a)) continue;
        g.line("  " + g.G(y.a) + "[0] = gr_accumulate(" + g.G(y.a) + "[0], " +
               call(y.op, CallSide::A, g.G(k) + "[0]", g.V(y.a) + "[0]", "", g.V(k) + "[0]", "GRK_REAL(" + lit(y.scalar) + ")") + ");");
        break;
      case Stage::Copy:
        if (!an.active(y.a)) continue;
        g.line("  " + g.G(y.a) + "[0] = gr_accumulate(" + g.G(y.a) + "[0], " + g.G(k) + "[0]);");
        break;
      case Stage::SumAll: {
        if (!an.active(y.a)) continue;
        const int64_t n = an.n(y.a).numel;
        g.line("  for (long long e = 0; e < " + L(n) + "; ++e) {");
        g.line("    const gr_real gi = " + (y.op == Op::Mean ? "GRK_DIV(" + g.G(k) + "[0], (gr_real)" + L(n) + ")" : g.G(k) + "[0]") + ";");
        g.line("    " + g.G(y.a) + "[e] = gr_accumulate(" + g.G(y.a) + "[e], gi);");
        g.line("  }");
        break;
      }
      case Stage::Sce: {  // softmax cross-entropy (the per-node sce backward), rows ascending
        if (!an.active(y.a) && !an.active(y.b)) continue;
        const Shape& sx = an.n(y.a).shape;
        const std::string R = L(sx[0]), C = L(sx[1]);
        g.line("  for (long long r = 0; r < " + R + "; ++r) {");
        g.line("    const gr_real q = GRK_DIV(" + g.G(k) + "[0], (gr_real)" + R + ");");
        g.line("    gr_sce_row_bwd(" + g.V(y.a) + " + r * " + C + ", " + g.V(y.b) + " + r * " + C + ", q, " +
               (an.active(y.a) ? g.G(y.a) + " + r * " + C : std::string("(gr_real*)0")) + ", " +
               (an.active(y.b) ? g.G(y.b) + " + r * " + C : std::string("(gr_real*)0")) + ", " + C + ");");
        g.line("  }");
        break;
      }
      case Stage::Matmul:
      case Stage::Lane:
      case Stage::Row:
      case Stage::None: no_stage(y, "serial segment");
    }
  }
  g.close(name);
  return true;
}

}  // namespace gr::fuse::detail
