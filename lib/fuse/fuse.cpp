// fuse.cpp — the fusion planner, the kernel generator and the fused driver (docs/fusion.md).
//
// Bit-exactness: every fused element is computed by one thread with the same shared functions the
// per-node kernels call (grk_bin_fwd / grk_bin_contrib / grk_un_fwd / grk_un_contrib /
// gr_accumulate / the lane functions, all from kernel_source(dtype), which the generated text is
// appended to) and with the same inner-loop orders (matmul Σ_k from 0, dW Σ_rows from 0 then added,
// broadcast b-side walks adding straight into the slot in ascending output order). Gradient slots
// receive their contributions in the per-node order (descending node id, a-side before b-side):
// row-space contributions in the row kernel's descending stages, parameter-space ones after it, and
// a segment where one slot would get both kinds keeps its per-node backward (order safety).
#include "fuse/fuse.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <map>
#include <set>

namespace gr::fuse {

namespace {

using NodeView = replay::Program::NodeView;

bool is_leaf(Op op) { return op == Op::Param || op == Op::Const; }
bool is_binary(Op op) { return op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div; }
bool is_unary(Op op) {
  switch (op) {
    case Op::Neg:
    case Op::AddScalar:
    case Op::MulScalar:
    case Op::Relu:
    case Op::Sigmoid:
    case Op::Tanh:
    case Op::Exp:
    case Op::Log:
    case Op::Sqrt: return true;
    default: return false;
  }
}

const char* bin_code(Op op) {
  switch (op) {
    case Op::Add: return "GRK_BIN_ADD";
    case Op::Sub: return "GRK_BIN_SUB";
    case Op::Mul: return "GRK_BIN_MUL";
    default: return "GRK_BIN_DIV";
  }
}

const char* un_code(Op op) {
  switch (op) {
    case Op::Neg: return "GRK_UN_NEG";
    case Op::AddScalar: return "GRK_UN_ADDS";
    case Op::MulScalar: return "GRK_UN_MULS";
    case Op::Relu: return "GRK_UN_RELU";
    case Op::Sigmoid: return "GRK_UN_SIGMOID";
    case Op::Tanh: return "GRK_UN_TANH";
    case Op::Exp: return "GRK_UN_EXP";
    case Op::Log: return "GRK_UN_LOG";
    case Op::Sqrt: return "GRK_UN_SQRT";
    default: return "GRK_UN_COPY";
  }
}

std::string L(int64_t v) { return std::to_string(v) + "LL"; }

// The exact double, whatever it is (NaN payloads and -0 included), as a kernel expression.
std::string lit(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "__longlong_as_double((long long)0x%016llxULL)",
                static_cast<unsigned long long>(std::bit_cast<uint64_t>(d)));
  return buf;
}

// How a binary node's b-side meets its [B, C] output.
enum class BSide { Row, Col, Scal, None };

struct Analyzer {
  const replay::Program& prog;
  PlanOptions opt;
  std::vector<NodeView> nv;

  explicit Analyzer(const replay::Program& p, PlanOptions o) : prog(p), opt(o) {
    for (int32_t id = 0; id < p.size(); ++id) nv.push_back(p.node_view(id));
  }
  const NodeView& n(int32_t id) const { return nv[static_cast<size_t>(id)]; }
  bool active(int32_t id) const { return id >= 0 && n(id).active; }

  BSide bside(int32_t k) const {
    const NodeView& y = n(k);
    const Shape& sb = n(y.b).shape;
    const int64_t C = y.shape[1];
    if (sb == y.shape) return BSide::Row;
    if (sb.rank() == 1 && sb[0] == C) return BSide::Col;
    if (sb.rank() == 2 && sb[0] == 1 && sb[1] == C) return BSide::Col;
    if (sb.numel() == 1 && sb.rank() <= 2) return BSide::Scal;
    return BSide::None;
  }

  // Row-local over B = shape[0] (0 = not row-local).
  int64_t row_local(int32_t k) const {
    const NodeView& y = n(k);
    if (y.shape.rank() != 2) return 0;
    const int64_t B = y.shape[0];
    if (is_binary(y.op)) {
      if (!(n(y.a).shape == y.shape)) return 0;
      return bside(k) == BSide::None ? 0 : B;
    }
    if (is_unary(y.op)) return n(y.a).shape == y.shape ? B : 0;
    if (y.op == Op::Matmul) {
      const NodeView &a = n(y.a), &w = n(y.b);
      if (a.shape.rank() != 2 || a.shape[0] != B || !is_leaf(w.op) || w.shape.rank() != 2) return 0;
      if (y.a == y.b) return 0;
      return B;
    }
    if ((y.op == Op::Softmax || y.op == Op::LogSoftmax) && opt.lanes) return y.axis == 1 ? B : 0;
    return 0;
  }

  bool serial_ok(int32_t k) const {
    const NodeView& y = n(k);
    if (is_binary(y.op)) return y.numel == 1 && n(y.a).numel == 1 && n(y.b).numel == 1;
    if (is_unary(y.op) || y.op == Op::Reshape) return y.numel == 1 && n(y.a).numel == 1;
    if (y.op == Op::Sum || y.op == Op::Mean) return y.axis == kAllAxes;
    if (y.op == Op::SoftmaxCrossEntropy) return opt.lanes;
    return false;
  }
};

// ---- code generation ---------------------------------------------------------------------------------
struct Gen {
  int32_t N;  // node count: vt[k] = value of k, vt[N + k] = gradient of k, vt[2N] = gradient slab
  std::string out;
  void line(const std::string& s) { out += s + "\n"; }
  std::string V(int32_t k) const { return "v" + std::to_string(k); }
  std::string G(int32_t k) const { return "g" + std::to_string(k); }
  void decls(const std::set<int32_t>& vs, const std::set<int32_t>& gs) {
    for (int32_t k : vs) line("  gr_real* " + V(k) + " = (gr_real*)(unsigned long long)vt[" + std::to_string(k) + "];");
    for (int32_t k : gs)
      line("  gr_real* " + G(k) + " = (gr_real*)(unsigned long long)vt[" + std::to_string(N + k) + "];");
  }
  void open(const std::string& name) {
    line("extern \"C\" __global__ void " + name + "(const long long* vt, long long B) {");
  }
  void close(const std::string& name) {
    line("}");
    line("GR_EXPORT_KERNEL(" + name + ")");
  }
};

std::string col_loop(int64_t W) {
  return "    for (long long c = threadIdx.x; c < " + L(W) + "; c += blockDim.x) {";
}

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
    const int64_t C = y.shape[1];
    const std::string row = "s * " + L(C) + " + c";
    g.line("    // node " + std::to_string(k) + ": " + std::string(op_name(y.op)) + " " + y.shape.str());
    if (is_binary(y.op)) {
      std::string b;
      switch (an.bside(k)) {
        case BSide::Row: b = g.V(y.b) + "[" + row + "]"; break;
        case BSide::Col: b = g.V(y.b) + "[c]"; break;
        default: b = g.V(y.b) + "[0]"; break;
      }
      g.line(col_loop(C));
      g.line("      " + g.V(k) + "[" + row + "] = grk_bin_fwd(" + bin_code(y.op) + ", " + g.V(y.a) + "[" + row + "], " + b +
             ");");
      g.line("    }");
    } else if (is_unary(y.op)) {
      g.line(col_loop(C));
      g.line("      " + g.V(k) + "[" + row + "] = grk_un_fwd(" + un_code(y.op) + ", " + g.V(y.a) + "[" + row +
             "], GRK_REAL(" + lit(y.scalar) + "));");
      g.line("    }");
    } else if (y.op == Op::Matmul) {
      const int64_t K = an.n(y.a).shape[1];
      g.line(col_loop(C));
      g.line("      gr_real acc = 0;");
      g.line("      for (long long k = 0; k < " + L(K) + "; ++k) acc = GRK_ADD(acc, GRK_MUL(" + g.V(y.a) + "[s * " + L(K) +
             " + k], " + g.V(y.b) + "[k * " + L(C) + " + c]));");
      g.line("      " + g.V(k) + "[" + row + "] = acc;");
      g.line("    }");
    } else {  // softmax / log_softmax over the last axis: one thread per lane (= row), as the per-node kernel
      const char* fn = y.op == Op::Softmax ? "gr_softmax_lane_fwd" : "gr_log_softmax_lane_fwd";
      g.line("    if (threadIdx.x == 0) " + std::string(fn) + "(" + g.V(y.a) + " + s * " + L(C) + ", " + g.V(k) + " + s * " +
             L(C) + ", " + L(C) + ", 1LL);");
    }
    if (i + 1 < seg.nodes.size()) g.line("    __syncthreads();");
  }
  g.line("  }");
  g.close(name);
}

// ---- row segments: backward ---------------------------------------------------------------------------
struct Job {  // one parameter-space contribution
  int32_t consumer;
  int kind;  // 0 matmul dW, 1 b-side column, 2 b-side scalar
};

struct BwdSplit {
  std::map<int32_t, std::vector<Job>> param;  // target -> jobs, descending consumer
  std::vector<int32_t> param_order;           // targets in first-seen order
  std::set<int32_t> row_targets;
  bool row_work = false;
};

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
    if (is_binary(y.op)) {
      row(y.a);
      const BSide bs = an.bside(k);
      if (bs == BSide::Row) row(y.b);
      else par(y.b, bs == BSide::Col ? 1 : 2);
    } else if (y.op == Op::Matmul) {
      row(y.a);
      par(y.b, 0);
    } else {
      row(y.a);
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
    const Shape& sx = an.n(h.a).shape;
    const std::string C = L(sx[1]);
    g.line("    // node " + std::to_string(seg.head) + ": " + std::string(op_name(h.op)) + " (segment head)");
    if (h.op == Op::SoftmaxCrossEntropy) {  // grk_sce_bwd: one thread per row
      g.line("    if (threadIdx.x == 0) {");
      g.line("      const gr_real q = GRK_DIV(" + g.G(seg.head) + "[0], (gr_real)" + L(sx[0]) + ");");
      g.line("      gr_sce_row_bwd(" + g.V(h.a) + " + s * " + C + ", " + g.V(h.b) + " + s * " + C + ", q, " +
             (an.active(h.a) ? g.G(h.a) + " + s * " + C : std::string("(gr_real*)0")) + ", " +
             (an.active(h.b) ? g.G(h.b) + " + s * " + C : std::string("(gr_real*)0")) + ", " + C + ");");
      g.line("    }");
    } else {  // sum / mean over all axes (grk_sum_all_bwd)
      const int64_t n = sx.numel();
      g.line(col_loop(sx[1]));
      g.line("      const gr_real gi = " +
             (h.op == Op::Mean ? "GRK_DIV(" + g.G(seg.head) + "[0], (gr_real)" + L(n) + ")" : g.G(seg.head) + "[0]") + ";");
      g.line("      " + g.G(h.a) + "[s * " + C + " + c] = gr_accumulate(" + g.G(h.a) + "[s * " + C + " + c], gi);");
      g.line("    }");
    }
    first = false;
  }
  for (auto it = seg.nodes.rbegin(); it != seg.nodes.rend(); ++it) {
    const int32_t k = *it;
    if (!an.active(k)) continue;
    const NodeView& y = an.n(k);
    const int64_t C = y.shape[1];
    const std::string row = "s * " + L(C) + " + c";
    std::string body;
    auto acc_into = [&](const std::string& slot, const std::string& contrib) {
      body += "      " + slot + " = gr_accumulate(" + slot + ", " + contrib + ");\n";
    };
    if (is_binary(y.op)) {
      const BSide bs = an.bside(k);
      std::string b;
      switch (bs) {
        case BSide::Row: b = g.V(y.b) + "[" + row + "]"; break;
        case BSide::Col: b = g.V(y.b) + "[c]"; break;
        default: b = g.V(y.b) + "[0]"; break;
      }
      const std::string args = g.G(k) + "[" + row + "], " + g.V(y.a) + "[" + row + "], " + b + ", " + g.V(k) + "[" + row + "]";
      if (an.active(y.a)) acc_into(g.G(y.a) + "[" + row + "]", "grk_bin_contrib(" + std::string(bin_code(y.op)) + ", 0, " + args + ")");
      if (bs == BSide::Row && an.active(y.b))
        acc_into(g.G(y.b) + "[" + row + "]", "grk_bin_contrib(" + std::string(bin_code(y.op)) + ", 1, " + args + ")");
      if (body.empty()) continue;
      body = col_loop(C) + "\n" + body + "    }";
    } else if (is_unary(y.op)) {
      if (!an.active(y.a)) continue;
      acc_into(g.G(y.a) + "[" + row + "]", "grk_un_contrib(" + std::string(un_code(y.op)) + ", " + g.G(k) + "[" + row + "], " +
                                               g.V(y.a) + "[" + row + "], " + g.V(k) + "[" + row + "], GRK_REAL(" + lit(y.scalar) + "))");
      body = col_loop(C) + "\n" + body + "    }";
    } else if (y.op == Op::Matmul) {
      if (!an.active(y.a)) continue;
      const int64_t K = an.n(y.a).shape[1];
      body = col_loop(K) + "\n";  // c = k of dA[s, k]
      body += "      gr_real acc = 0;\n";
      body += "      for (long long j = 0; j < " + L(C) + "; ++j) acc = GRK_ADD(acc, GRK_MUL(" + g.G(k) + "[s * " + L(C) +
              " + j], " + g.V(y.b) + "[c * " + L(C) + " + j]));\n";
      body += "      " + g.G(y.a) + "[s * " + L(K) + " + c] = GRK_ADD(" + g.G(y.a) + "[s * " + L(K) + " + c], acc);\n";
      body += "    }";
    } else {  // softmax / log_softmax lane
      if (!an.active(y.a)) continue;
      const char* fn = y.op == Op::Softmax ? "gr_softmax_lane_bwd" : "gr_log_softmax_lane_bwd";
      body = "    if (threadIdx.x == 0) " + std::string(fn) + "(" + g.G(k) + " + s * " + L(C) + ", " + g.V(k) + " + s * " +
             L(C) + ", " + g.G(y.a) + " + s * " + L(C) + ", " + L(C) + ", 1LL);";
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
      const int64_t C = y.shape[1];
      if (j.kind == 0) {  // dW[kk, c] = dW + Σ_{r asc} A[r, kk]·g[r, c]  (grk_bmm_bwd_b_impl)
        const int64_t K = an.n(y.a).shape[1];
        g.line("    {  // matmul node " + std::to_string(k));
        g.line("      const long long kk = i / " + L(C) + ", c = i - kk * " + L(C) + ";");
        g.line("      gr_real acc = 0;");
        g.line("      for (long long r = 0; r < B; ++r) acc = GRK_ADD(acc, GRK_MUL(" + g.V(y.a) + "[r * " + L(K) + " + kk], " +
               g.G(k) + "[r * " + L(C) + " + c]));");
        g.line("      " + g.G(t) + "[i] = GRK_ADD(" + g.G(t) + "[i], acc);");
        g.line("    }");
      } else if (j.kind == 1) {  // b-side [C]: output rows ascending (the broadcast walk)
        g.line("    for (long long r = 0; r < B; ++r)  // " + std::string(op_name(y.op)) + " node " + std::to_string(k));
        g.line("      " + g.G(t) + "[i] = gr_accumulate(" + g.G(t) + "[i], grk_bin_contrib(" + bin_code(y.op) + ", 1, " + g.G(k) +
               "[r * " + L(C) + " + i], " + g.V(y.a) + "[r * " + L(C) + " + i], " + g.V(y.b) + "[i], " + g.V(k) + "[r * " + L(C) +
               " + i]));");
      } else {  // b-side scalar: every output element ascending
        g.line("    for (long long e = 0; e < B * " + L(C) + "; ++e)  // " + std::string(op_name(y.op)) + " node " +
               std::to_string(k));
        g.line("      " + g.G(t) + "[i] = gr_accumulate(" + g.G(t) + "[i], grk_bin_contrib(" + bin_code(y.op) + ", 1, " + g.G(k) +
               "[e], " + g.V(y.a) + "[e], " + g.V(y.b) + "[0], " + g.V(k) + "[e]));");
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
    if (is_binary(y.op)) {
      g.line("  " + g.V(k) + "[0] = grk_bin_fwd(" + bin_code(y.op) + ", " + g.V(y.a) + "[0], " + g.V(y.b) + "[0]);");
    } else if (is_unary(y.op) || y.op == Op::Reshape) {
      g.line("  " + g.V(k) + "[0] = grk_un_fwd(" + un_code(y.op) + ", " + g.V(y.a) + "[0], GRK_REAL(" +
             lit(y.op == Op::Reshape ? 0.0 : y.scalar) + "));");
    } else if (y.op == Op::Sum || y.op == Op::Mean) {
      const int64_t n = an.n(y.a).numel;
      g.line("  {");
      g.line("    gr_real acc = 0;");
      g.line("    for (long long e = 0; e < " + L(n) + "; ++e) acc = GRK_ADD(acc, " + g.V(y.a) + "[e]);");
      g.line("    " + g.V(k) + "[0] = " + (y.op == Op::Mean ? "GRK_DIV(acc, (gr_real)" + L(n) + ")" : std::string("acc")) + ";");
      g.line("  }");
    } else {  // softmax cross-entropy (grk_sce_fwd)
      const Shape& sx = an.n(y.a).shape;
      g.line("  {");
      g.line("    gr_real total = 0;");
      g.line("    for (long long r = 0; r < " + L(sx[0]) + "; ++r) total = GRK_ADD(total, gr_sce_row_fwd(" + g.V(y.a) + " + r * " +
             L(sx[1]) + ", " + g.V(y.b) + " + r * " + L(sx[1]) + ", " + L(sx[1]) + "));");
      g.line("    " + g.V(k) + "[0] = gr_sce_finish(total, " + L(sx[0]) + ");");
      g.line("  }");
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
    if (is_binary(y.op)) {
      const std::string args = g.G(k) + "[0], " + g.V(y.a) + "[0], " + g.V(y.b) + "[0], " + g.V(k) + "[0]";
      if (an.active(y.a))
        g.line("  " + g.G(y.a) + "[0] = gr_accumulate(" + g.G(y.a) + "[0], grk_bin_contrib(" + bin_code(y.op) + ", 0, " + args + "));");
      if (an.active(y.b))
        g.line("  " + g.G(y.b) + "[0] = gr_accumulate(" + g.G(y.b) + "[0], grk_bin_contrib(" + bin_code(y.op) + ", 1, " + args + "));");
    } else if (is_unary(y.op) || y.op == Op::Reshape) {
      if (!an.active(y.a)) continue;
      g.line("  " + g.G(y.a) + "[0] = gr_accumulate(" + g.G(y.a) + "[0], grk_un_contrib(" + un_code(y.op) + ", " + g.G(k) + "[0], " +
             g.V(y.a) + "[0], " + g.V(k) + "[0], GRK_REAL(" + lit(y.op == Op::Reshape ? 0.0 : y.scalar) + ")));");
    } else if (y.op == Op::Sum || y.op == Op::Mean) {
      if (!an.active(y.a)) continue;
      const int64_t n = an.n(y.a).numel;
      g.line("  for (long long e = 0; e < " + L(n) + "; ++e) {");
      g.line("    const gr_real gi = " + (y.op == Op::Mean ? "GRK_DIV(" + g.G(k) + "[0], (gr_real)" + L(n) + ")" : g.G(k) + "[0]") + ";");
      g.line("    " + g.G(y.a) + "[e] = gr_accumulate(" + g.G(y.a) + "[e], gi);");
      g.line("  }");
    } else {  // softmax cross-entropy (grk_sce_bwd), rows ascending
      if (!an.active(y.a) && !an.active(y.b)) continue;
      const Shape& sx = an.n(y.a).shape;
      const std::string R = L(sx[0]), C = L(sx[1]);
      g.line("  for (long long r = 0; r < " + R + "; ++r) {");
      g.line("    const gr_real q = GRK_DIV(" + g.G(k) + "[0], (gr_real)" + R + ");");
      g.line("    gr_sce_row_bwd(" + g.V(y.a) + " + r * " + C + ", " + g.V(y.b) + " + r * " + C + ", q, " +
             (an.active(y.a) ? g.G(y.a) + " + r * " + C : std::string("(gr_real*)0")) + ", " +
             (an.active(y.b) ? g.G(y.b) + " + r * " + C : std::string("(gr_real*)0")) + ", " + C + ");");
      g.line("  }");
    }
  }
  g.close(name);
  return true;
}

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
      const bool rows_ok = sx.rank() == 2 && sx[0] == seg.rows;
      if (hv.op == Op::SoftmaxCrossEntropy && rows_ok) seg.head = h;
      if ((hv.op == Op::Sum || hv.op == Op::Mean) && hv.axis == kAllAxes && rows_ok) seg.head = h;
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
      if (!both.empty()) {
        seg.bwd_why = "order safety: the gradient of node " + std::to_string(both.front()) +
                      " collects both row-space and parameter-space contributions";
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
                                                              (pl.dtype == replay::DType::F32 ? 4 : 8))
                                       : 0;
    const int64_t s1 = an.active(loss) ? an.n(loss).numel : 0;
    g.open(pl.fill);
    g.line("  gr_real* gs = (gr_real*)(unsigned long long)vt[" + std::to_string(2 * n) + "];");
    g.line("  GRK_LOOP(e, " + L(pl.fill_width) + ") gs[e] = (e >= " + L(s0) + " && e < " + L(s0 + s1) +
           ") ? (gr_real)1 : (gr_real)0;");
    g.close(pl.fill);
  }
  std::string gen = g.out;
  pl.id = fnv1a(gen + (pl.dtype == replay::DType::F32 ? "|f32" : "|f64"));
  char idbuf[32];
  std::snprintf(idbuf, sizeof idbuf, "%012llx", static_cast<unsigned long long>(pl.id & 0xffffffffffffULL));
  const std::string ids = idbuf;
  replace_all(gen, "@ID@", ids);
  replace_all(pl.fill, "@ID@", ids);
  for (Segment& seg : pl.segments)
    for (std::string* s : {&seg.fwd, &seg.bwd_row, &seg.bwd_param}) replace_all(*s, "@ID@", ids);
  pl.generated = "\n// ---- generated by lib/fuse (plan " + ids + ") ----\n" + gen;
  pl.source = replay::kernel_source(pl.dtype) + pl.generated;
  pl.module_name = "gr_fuse_" + ids;

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
                dtype == replay::DType::F32 ? "f32" : "f64", segments.size());
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
  return backend.name() == "cuda" && plan.fuses() && plan.fused_launches() < plan.per_node_launches();
}

// ---- the fused driver -------------------------------------------------------------------------------
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
  auto grid_for = [&](int64_t work, bool rows) {
    const int64_t blocks = rows ? std::max<int64_t>(work, 1) : (std::max<int64_t>(work, 1) + block - 1) / block;
    return static_cast<unsigned>(std::min<int64_t>(blocks, maxg));
  };
  auto gen = [&](const std::string& name, unsigned grid, unsigned blk, int64_t rows) {
    Step s;
    s.rows = rows;
    s.kernel = be_.kernel(module_, name);
    s.grid = grid;
    s.block = blk;
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
      fwd_.push_back(seg->kind == SegKind::Row ? gen(seg->fwd, grid_for(seg->rows, true), block, seg->rows) : gen(seg->fwd, 1, 1, 1));
      id = seg->hi;
      continue;
    }
    if (prog.node_forward_launches(id) > 0) fwd_.push_back(node(id));
  }
  // Backward: the fill (+ seed), then descending ids; a segment at its last id.
  if (!plan_.fill.empty()) bwd_.push_back(gen(plan_.fill, grid_for(plan_.fill_width, false), block, 0));
  for (int32_t id = n - 1; id >= 0; --id) {
    const Segment* seg = at_hi[static_cast<size_t>(id)];
    if (seg && seg->bwd_fused) {
      if (seg->kind == SegKind::Row) {
        if (!seg->bwd_row.empty()) bwd_.push_back(gen(seg->bwd_row, grid_for(seg->rows, true), block, seg->rows));
        if (!seg->bwd_param.empty()) bwd_.push_back(gen(seg->bwd_param, grid_for(seg->param_width, false), block, seg->rows));
      } else {
        bwd_.push_back(gen(seg->bwd_row, 1, 1, 1));
      }
      id = seg->lo;
      continue;
    }
    if (prog.node_backward_launches(id) > 0) bwd_.push_back(node(id));
  }
}

FusedProgram::~FusedProgram() {
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

void FusedProgram::forward() { run(fwd_, true); }
void FusedProgram::backward() { run(bwd_, false); }

void FusedProgram::capture_episode(replay::DeviceOptimizer* opt) {
  captured_ = false;
  be_.begin_capture();
  try {
    run(fwd_, true);
    run(bwd_, false);
    if (opt) opt->run_launches();
  } catch (...) {
    be_.end_capture();
    throw;
  }
  be_.end_capture();
  captured_ = true;
  episode_opt_ = opt;
}

void FusedProgram::run_episode(replay::DeviceOptimizer* opt) {
  if (!captured_ || !be_.has_capture()) throw Error("fuse: run_episode: no captured episode (call capture_episode first)");
  if (opt != episode_opt_) throw Error("fuse: run_episode: the episode was captured with a different optimizer (or none)");
  if (opt) opt->prepare();
  be_.replay();
}

}  // namespace gr::fuse
