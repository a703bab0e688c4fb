// detail.h — private to lib/fuse: what the planner (plan.cpp) and the kernel generator (codegen.cpp)
// share: node classification, the program analyzer, the code-text builder and the generator entry
// points. Not part of the public interface (fuse.h).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fuse/fuse.h"

namespace gr::fuse::detail {

using NodeView = replay::Program::NodeView;

// The planner's view of an op is its row's class and fusion class (kernels/gr_op_table.h).
inline bool is_leaf(Op op) { return op_info(op).leaf(); }
inline bool is_binary(Op op) { return op_info(op).cls == OpClass::Binary; }
inline bool is_unary(Op op) { return op_info(op).cls == OpClass::Unary; }

// What a node is as a stage of a row segment / a serial segment: exhaustive switches over the ops
// (elementwise, row and fold ops from their rows), so a new op that is not listed here does not compile.
enum class Stage { Unary, Binary, Matmul, Lane, Row, Copy, SumAll, Sce, None };

inline Stage row_stage(Op op) {
  switch (op) {
#define GR_FUSE_ROW_STAGE(E, name, arity, cls, attrs, stem, fwd, ...)                                \
  GR_OP_IF_UNARY_##cls(case Op::E: return Stage::Unary;) GR_OP_IF_BINARY_##cls(case Op::E: return Stage::Binary;) \
  GR_OP_IF_ROW_##cls(case Op::E: return Stage::Row;) GR_OP_IF_FOLD(cls, fwd, case Op::E: return Stage::None;) \
  GR_OP_IF_BATCH_##cls(case Op::E: return Stage::None;) \
  GR_OP_IF_WINDOW_##cls(case Op::E: return Stage::None;)
    GR_OP_TABLE(GR_FUSE_ROW_STAGE)
#undef GR_FUSE_ROW_STAGE
    case Op::Matmul: return Stage::Matmul;
    case Op::Softmax:
    case Op::LogSoftmax: return Stage::Lane;  // gr_<stem>_lane_fwd / _bwd over the last axis
    case Op::Param:
    case Op::Const:
    case Op::Sum:
    case Op::Mean:
    case Op::Bmm:
    case Op::Transpose:
    case Op::Reshape:
    case Op::Slice:
    case Op::Concat:
    case Op::SoftmaxCrossEntropy:
    case Op::CrossEntropy:
    case Op::Dropout:
    case Op::Embedding: return Stage::None;  // opaque: its per-node kernels run inside a fused episode
  }
  return Stage::None;
}

inline Stage serial_stage(Op op) {
  switch (op) {
#define GR_FUSE_SERIAL_STAGE(E, name, arity, cls, attrs, stem, fwd, ...)                             \
  GR_OP_IF_UNARY_##cls(case Op::E: return Stage::Unary;) GR_OP_IF_BINARY_##cls(case Op::E: return Stage::Binary;) \
  GR_OP_IF_ROW_##cls(case Op::E: return Stage::None;) GR_OP_IF_FOLD(cls, fwd, case Op::E: return Stage::None;) \
  GR_OP_IF_BATCH_##cls(case Op::E: return Stage::None;) \
  GR_OP_IF_WINDOW_##cls(case Op::E: return Stage::None;)
    GR_OP_TABLE(GR_FUSE_SERIAL_STAGE)
#undef GR_FUSE_SERIAL_STAGE
    case Op::Reshape: return Stage::Copy;
    case Op::Sum:
    case Op::Mean: return Stage::SumAll;  // over all axes (serial_ok, row_head)
    case Op::SoftmaxCrossEntropy: return Stage::Sce;
    case Op::Param:
    case Op::Const:
    case Op::Matmul:
    case Op::Bmm:
    case Op::Transpose:
    case Op::Slice:
    case Op::Concat:
    case Op::Softmax:
    case Op::LogSoftmax:
    case Op::CrossEntropy:
    case Op::Dropout:
    case Op::Embedding: return Stage::None;  // opaque: its per-node kernels run inside a fused episode
  }
  return Stage::None;
}

// An integer as a kernel long long literal.
inline std::string L(int64_t v) { return std::to_string(v) + "LL"; }

// How a binary node's b-side meets its (flattened) [B, C] output.
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

  // A rank >= 2 tensor as flattened rows over its last axis: [d0, ..., d(r-2), C] is [d0·…·d(r-2), C]
  // row-major, the same bytes (the per-node kernels index it the same way: matmul's [..., M, K] is
  // [M·…, K], a row op's and a last-axis lane's row is numel / C). Flattened row s is elements
  // s·C .. s·C + C − 1 of every [*, C] node of a segment.
  static int64_t cols(const Shape& s) { return s[s.rank() - 1]; }
  static int64_t rows(const Shape& s) { return s.numel() / cols(s); }
  static bool flat_ok(const Shape& s) { return s.rank() >= 2 && s[s.rank() - 1] > 0; }

  // How a binary node's b-side meets its flattened [B, C] output. Column means the b-side repeats along
  // every row: [C] or [1, ..., 1, C] (numpy broadcasting repeats it over all leading axes). A b-side
  // that varies along some leading axes but not others (the [T, D] position table added to [N, T, D])
  // is none of these: refused (None), so the node is not row-local.
  BSide bside(int32_t k) const {
    const NodeView& y = n(k);
    const Shape& sb = n(y.b).shape;
    const int64_t C = cols(y.shape);
    if (sb == y.shape) return BSide::Row;
    if (sb.rank() >= 1 && sb.rank() <= y.shape.rank() && sb[sb.rank() - 1] == C && sb.numel() == C) return BSide::Col;
    if (sb.numel() == 1 && sb.rank() <= y.shape.rank()) return BSide::Scal;
    return BSide::None;
  }

  // Row-local over B = its flattened row count (0 = not row-local), by the row's fusion class.
  int64_t row_local(int32_t k) const {
    const NodeView& y = n(k);
    if (!flat_ok(y.shape)) return 0;
    const int64_t B = rows(y.shape);
    switch (op_info(y.op).fusion) {
      case FusionClass::Elementwise:
        if (is_unary(y.op)) return n(y.a).shape == y.shape ? B : 0;
        if (!(n(y.a).shape == y.shape)) return 0;
        return bside(k) == BSide::None ? 0 : B;
      case FusionClass::Matmul: {  // act[..., K] · W[K, C]: flattened row s of y from row s of act
        const NodeView &a = n(y.a), &w = n(y.b);
        if (!flat_ok(a.shape) || rows(a.shape) != B || !is_leaf(w.op) || w.shape.rank() != 2) return 0;
        if (y.a == y.b) return 0;
        return B;
      }
      case FusionClass::Lane:  // over the last axis; causal: lane s is query row s mod Tq (gr_causal_visible)
        return opt.lanes && y.axis == static_cast<int32_t>(y.shape.rank()) - 1 ? B : 0;
      case FusionClass::Opaque:
      case FusionClass::Reduce:
      case FusionClass::LaneLoss:
      case FusionClass::Copy: return 0;
    }
    return 0;
  }

  // May run as a stage of a serial (one-thread) segment.
  bool serial_ok(int32_t k) const {
    const NodeView& y = n(k);
    switch (op_info(y.op).fusion) {
      case FusionClass::Elementwise:
        return y.numel == 1 && n(y.a).numel == 1 && (!is_binary(y.op) || n(y.b).numel == 1);
      case FusionClass::Copy: return y.numel == 1 && n(y.a).numel == 1;
      case FusionClass::Reduce: return y.axis == kAllAxes;
      case FusionClass::LaneLoss: return opt.lanes;
      case FusionClass::Opaque:
      case FusionClass::Matmul:
      case FusionClass::Lane: return false;
    }
    return false;
  }

  // May head a row segment (its backward seeds the rows): a reduction over all axes or a lane loss.
  bool row_head(int32_t k) const {
    const NodeView& y = n(k);
    switch (op_info(y.op).fusion) {
      case FusionClass::Reduce: return y.axis == kAllAxes;
      case FusionClass::LaneLoss: return true;
      case FusionClass::Opaque:
      case FusionClass::Elementwise:
      case FusionClass::Matmul:
      case FusionClass::Lane:
      case FusionClass::Copy: return false;
    }
    return false;
  }
};

// ---- the code-text builder ----------------------------------------------------------------------------
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

// ---- row segments: backward split ---------------------------------------------------------------------
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

// Which gradient slots a row segment's backward touches, and in which space (row or parameter).
BwdSplit split_bwd(const Analyzer& an, const Segment& seg);

// The generators (codegen.cpp): each appends one kernel named `name` to g.out.
void gen_row_fwd(const Analyzer& an, Gen& g, const Segment& seg, const std::string& name);
void gen_row_bwd(const Analyzer& an, Gen& g, const Segment& seg, const std::string& name);
// Returns the widest parameter target (the kernel's grid-stride width).
int64_t gen_param_bwd(const Analyzer& an, Gen& g, const BwdSplit& sp, const std::string& name);
void gen_serial_fwd(const Analyzer& an, Gen& g, const Segment& seg, const std::string& name);
// Returns false when the segment has no backward work.
bool gen_serial_bwd(const Analyzer& an, Gen& g, const Segment& seg, const std::string& name);

}  // namespace gr::fuse::detail
