// emit.cpp — tape → CUDA-C, node by node (see emit.h for the contract and the mirrored orders).
#include "emit/emit.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>

#include "emit/bind_expr.h"
#include "emit/kernel_text.h"
#include "grad/op_render.h"

namespace gr {

namespace {

// The emitter's rule table: one case per op, no default (-Werror=switch). The elementwise ops emit
// from their rows (op_render.h), the other Emit=Yes ops have a rule here, and the refusals are the
// Emit=No rows' case labels, generated from the column (GR_EMIT_REFUSED): a new op that cannot be
// emitted needs no edit here, and one marked Yes without a rule does not compile. The forward and
// backward switches below have the same shape.
constexpr bool has_rule(Op op) {
  switch (op) {
#define GR_EMIT_EW_RULE(E, name, arity, cls, ...) GR_OP_IF_UNARY_##cls(case Op::E:) GR_OP_IF_BINARY_##cls(case Op::E:)
    GR_OP_TABLE(GR_EMIT_EW_RULE)
#undef GR_EMIT_EW_RULE
    case Op::Param:
    case Op::Const:
    case Op::Sum:
    case Op::Mean:
    case Op::Reshape: return true;
#define GR_EMIT_REFUSED(E, name, arity, cls, attrs, stem, fwd, bwda, bwdb, shape, fusion, emit, ...) GR_OP_IF_EMIT_NO_##emit(case Op::E:)
      GR_OP_TABLE(GR_EMIT_REFUSED)  // the Emit=No rows
      return false;
  }
  return false;
}
// GR_EMIT_REFUSED stays defined: the render switches below list the same Emit=No rows.

constexpr bool rules_match_op_table() {
  for (const OpInfo& info : kOps)
    if (has_rule(info.op) != info.emit_scalar) return false;
  return true;
}
static_assert(rules_match_op_table(),
              "lib/emit: the emitter's rules disagree with the Emit column of kernels/gr_op_table.h "
              "(an op marked Emit=Yes needs forward and backward rules in emit.cpp, and vice versa)");

std::string shortest_decimal(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string hex_bits(uint64_t b) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, b >>= 4) s[static_cast<size_t>(i)] = digits[b & 15];
  return s;
}

// Text for a // comment: no control characters (a line break would end the comment), no backslash
// (a backslash before the line break would splice the next line of code into it) and no "??"
// (the trigraph ??/ is a backslash to a compiler that still reads trigraphs, e.g. -std=c++11).
std::string comment_text(std::string s) {
  for (size_t i = 0; i < s.size(); ++i) {
    char& c = s[i];
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    else if (c == '\\') c = '/';
    else if (c == '?' && i > 0 && s[i - 1] == '?') c = '.';
  }
  return s;
}

std::string pad(std::string code, size_t column) {
  if (code.size() < column) code.append(column - code.size(), ' ');
  else code += ' ';
  return code;
}

class Emitter {
 public:
  explicit Emitter(const EmitRequest& r) : r_(r), t_(*r.tape) {}

  std::string run() {
    check_request();
    collect_cone();
    check_nodes();
    collect_reached();
    std::string out;
    write_preamble(out);
    write_function(out);
    return out;
  }

 private:
  const EmitRequest& r_;
  const Tape& t_;
  int32_t loss_ = -1;
  std::map<int32_t, int> param_index_;  // node id → j
  std::map<int32_t, std::string> bound_;  // node id → the bind grammar's re-print of its expression
  std::vector<char> cone_, reached_;

  // ---- names -----------------------------------------------------------------------------------
  std::string label(int32_t id) const {
    if (id >= 0 && static_cast<size_t>(id) < r_.names.size() && !r_.names[static_cast<size_t>(id)].label.empty())
      return r_.names[static_cast<size_t>(id)].label;
    return "node " + std::to_string(id);
  }
  std::string place(int32_t id) const {
    if (id >= 0 && static_cast<size_t>(id) < r_.names.size()) return r_.names[static_cast<size_t>(id)].place;
    return "";
  }
  [[noreturn]] void fail(int32_t id, const std::string& what) const {
    throw EmitError(id, place(id), "\"" + label(id) + "\" (tape node " + std::to_string(id) + ", " +
                                       std::string(op_name(t_.node(id).op)) + "): " + what);
  }
  static std::string t(int32_t id) { return "t" + std::to_string(id); }
  static std::string g(int32_t id) { return "g" + std::to_string(id); }

  // ---- checks ----------------------------------------------------------------------------------
  void check_request() {
    if (!r_.tape) throw Error("emit: no tape");
    if (!r_.tape->ok()) throw Error("emit: the tape is poisoned: " + r_.tape->error());
    loss_ = r_.loss.id;
    if (loss_ < 0 || loss_ >= t_.size()) throw Error("emit: the loss is not a node of the tape");
    if (const std::string why = function_name_problem(r_.function); !why.empty()) throw Error("emit: " + why);
    for (size_t j = 0; j < r_.params.size(); ++j) {
      const int32_t id = r_.params[j].id;
      if (id < 0 || id >= t_.size() || t_.node(id).op != Op::Param)
        throw Error("emit: parameter " + std::to_string(j) + " is not a parameter node of the tape");
      if (t_.node(id).numel() != 1)
        fail(id, "has shape " + t_.node(id).shape.str() +
                     "; the scalar emitter binds each parameter to one p[j], so every parameter must hold exactly one element");
      if (!param_index_.emplace(id, static_cast<int>(j)).second)
        throw Error("emit: parameter node " + std::to_string(id) + " is registered twice");
    }
    for (const auto& [id, expr] : r_.bound) {
      if (id < 0 || id >= t_.size()) throw Error("emit: a binding names node " + std::to_string(id) + ", not on the tape");
      if (t_.node(id).op != Op::Const) fail(id, "only constant leaves (data inputs) bind to C expressions");
      if (expr.empty()) fail(id, "empty C expression");
      // Bound expressions are pasted into the source: only the bind grammar's re-print goes
      // there, whoever built the request (docs/security.md).
      try {
        bound_[id] = parse_bind(expr, r_.signature, static_cast<int64_t>(r_.params.size()));
      } catch (const BindError& e) {
        fail(id, "emit.bind expression refused: " + std::string(e.what()));
      }
    }
  }

  void collect_cone() {
    cone_.assign(static_cast<size_t>(loss_) + 1, 0);
    cone_[static_cast<size_t>(loss_)] = 1;
    for (int32_t id = loss_; id >= 0; --id) {
      if (!cone_[static_cast<size_t>(id)]) continue;
      const Node& n = t_.node(id);
      if (n.a >= 0) cone_[static_cast<size_t>(n.a)] = 1;
      if (n.b >= 0) cone_[static_cast<size_t>(n.b)] = 1;
    }
  }

  void check_nodes() const {
    for (int32_t id = 0; id <= loss_; ++id) {
      if (!cone_[static_cast<size_t>(id)]) continue;
      const Node& n = t_.node(id);
      if (n.numel() != 1)
        fail(id, "has shape " + n.shape.str() + " (" + std::to_string(n.numel()) +
                     " elements); the scalar emitter needs every node the loss depends on to hold exactly one element");
      if (!op_info(n.op).emit_scalar)
        fail(id, "the scalar emitter does not support " + std::string(op_name(n.op)) + " (it emits: " +
                     emit_supported_ops() + ")");
      if (n.op == Op::Param && !param_index_.count(id)) fail(id, "a parameter that is not among the registered ones");
      if (n.op == Op::Const && !r_.bound.count(id) && !n.val)
        fail(id, "a constant without a host value and without a C expression");
    }
  }

  // Which nodes the tape's reverse walk reaches (gives a gradient slot): the loss when a parameter
  // lies upstream, then every input with a parameter upstream of a reached node.
  void collect_reached() {
    reached_.assign(static_cast<size_t>(loss_) + 1, 0);
    reached_[static_cast<size_t>(loss_)] = t_.node(loss_).requires_grad ? 1 : 0;
    for (int32_t id = loss_; id >= 0; --id) {
      const Node& n = t_.node(id);
      if (!reached_[static_cast<size_t>(id)] || !n.requires_grad) continue;
      if (n.a >= 0 && t_.node(n.a).requires_grad) reached_[static_cast<size_t>(n.a)] = 1;
      if (n.b >= 0 && t_.node(n.b).requires_grad) reached_[static_cast<size_t>(n.b)] = 1;
    }
  }

  // ---- forward ---------------------------------------------------------------------------------
  std::string leaf_expr(int32_t id) const {
    const Node& n = t_.node(id);
    if (n.op == Op::Param) return "p[" + std::to_string(param_index_.at(id)) + "]";
    auto it = bound_.find(id);
    if (it != bound_.end()) {
      const std::string& e = it->second;
      const bool plain = std::all_of(e.begin(), e.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
      return plain ? e : "(" + e + ")";  // an identifier stands alone; anything else gets parentheses
    }
    return c_double_literal(n.val[0]);
  }

  std::string fwd_expr(int32_t id) const {
    const Node& n = t_.node(id);
    const std::string a = n.a >= 0 ? t(n.a) : "", b = n.b >= 0 ? t(n.b) : "";
    switch (n.op) {
      case Op::Param:
      case Op::Const: return leaf_expr(id);
#define GR_EMIT_EW_FWD(E, name, arity, cls, ...) GR_OP_IF_UNARY_##cls(case Op::E:) GR_OP_IF_BINARY_##cls(case Op::E:)
      GR_OP_TABLE(GR_EMIT_EW_FWD)
#undef GR_EMIT_EW_FWD
        return render_call(n.op, CallSide::Fwd, Operands{"", a, b, "", c_double_literal(n.scalar)});
      // The tape's reductions start their accumulator at 0.0 (so a -0.0 input sums to +0.0) and
      // mean divides by the element count (lane length for an axis), which is 1 here.
      case Op::Sum: return render_sum("__dadd_rn", "0.0", &a, 1);
      case Op::Mean: return "__ddiv_rn(" + render_sum("__dadd_rn", "0.0", &a, 1) + ", " + c_double_literal(reduced_count(n)) + ")";
      case Op::Reshape: return a;
        GR_OP_TABLE(GR_EMIT_REFUSED)  // the Emit=No rows
        break;
    }
    fail(id, "no scalar rule");  // unreachable: check_nodes refused it
  }

  // The count sum/mean divide by: all elements, or the reduced axis's length.
  double reduced_count(const Node& n) const {
    const Shape& in = t_.node(n.a).shape;
    return static_cast<double>(n.axis == kAllAxes ? in.numel() : in[n.axis]);
  }

  std::string fwd_comment(int32_t id) const {
    const Node& n = t_.node(id);
    std::string c = place(id);
    if (!c.empty()) c += "  ";
    c += label(id);
    if (n.op == Op::Param) return c + ": parameter " + std::to_string(param_index_.at(id));
    if (n.op == Op::Const) return r_.bound.count(id) ? c + ": data" : c + " = " + shortest_decimal(n.val[0]);
    c += " = " + std::string(op_name(n.op)) + "(" + label(n.a);
    if (n.b >= 0) c += ", " + label(n.b);
    if (op_info(n.op).attrs & kAttrScalar) c += ", " + shortest_decimal(n.scalar);
    return c + ")";
  }

  // ---- backward --------------------------------------------------------------------------------
  struct Contribution {
    int32_t to;
    std::string c;
  };

  // The node's contributions to its inputs, a-side then b-side, as the tape's rules give them.
  std::vector<Contribution> contributions(int32_t id) const {
    const Node& n = t_.node(id);
    const std::string gy = g(id), y = t(id);
    const std::string x = n.a >= 0 ? t(n.a) : "", b = n.b >= 0 ? t(n.b) : "";
    std::string ca, cb;  // empty: the op has no such side
    const Operands o{gy, x, b, y, c_double_literal(n.scalar)};
    switch (n.op) {
      case Op::Param:
      case Op::Const: return {};
#define GR_EMIT_EW_BWD(E, name, arity, cls, ...)                                                          \
  GR_OP_IF_UNARY_##cls(case Op::E: ca = render_call(n.op, CallSide::A, o); break;)                       \
  GR_OP_IF_BINARY_##cls(case Op::E: ca = render_call(n.op, CallSide::A, o), cb = render_call(n.op, CallSide::B, o); break;)
      GR_OP_TABLE(GR_EMIT_EW_BWD)
#undef GR_EMIT_EW_BWD
      case Op::Sum: ca = gy; break;
      case Op::Mean: ca = "__ddiv_rn(" + gy + ", " + c_double_literal(reduced_count(n)) + ")"; break;
      case Op::Reshape: ca = gy; break;
        GR_OP_TABLE(GR_EMIT_REFUSED)  // the Emit=No rows
        fail(id, "no scalar rule");  // unreachable: check_nodes refused it
    }
    std::vector<Contribution> out;
    if (!ca.empty() && t_.node(n.a).requires_grad) out.push_back({n.a, ca});
    if (!cb.empty() && t_.node(n.b).requires_grad) out.push_back({n.b, cb});
    return out;
  }

  // ---- output ----------------------------------------------------------------------------------
  void write_preamble(std::string& out) const {
    for (const std::string& line : r_.preamble) out += line.empty() ? "//\n" : "// " + comment_text(line) + "\n";
    if (!r_.preamble.empty()) out += "//\n";
    out +=
        "// Generated by gradrun emit-cuda (docs/emit.md): the gradient of a per-example scalar loss, derived\n"
        "// node by node from the recorded tape. Built with NVRTC (--fmad=false) or on the host with\n"
        "// -ffp-contract=off it reproduces the tape bit for bit. Self-contained: the scalar definitions\n"
        "// the tape uses (kernels/gr_device.h, gr_math.h, gr_ops_scalar.h) follow verbatim, without\n"
        "// their #pragma once and #include lines. Before including this file a program may define\n"
        "//   gr_emit_grad(g, j, val) how gradient j lands in g (default: g[j] = g[j] + val)\n"
        "//   gr_emit_loss(val)       to receive the loss value\n"
        "// Do not edit: regenerate with gradrun emit-cuda.\n\n";
    out += "#ifndef GR_EMIT_SCALAR_DEFINITIONS\n#define GR_EMIT_SCALAR_DEFINITIONS\n";
    // NVRTC warns about every static function a program does not call (#177); the definitions
    // this function leaves unused are expected.
    out +=
        "#if defined(__CUDACC_RTC__) || defined(__CUDACC__)\n"
        "#pragma nv_diagnostic push\n"
        "#pragma nv_diag_suppress 177\n"
        "#endif\n";
    for (const EmbeddedHeader& h : embedded_kernel_headers()) {
      out += "\n// ==== " + std::string(h.name) + " ====\n";
      out += h.text;
      if (!h.text.empty() && h.text.back() != '\n') out += '\n';
    }
    out +=
        "\n#if defined(__CUDACC_RTC__) || defined(__CUDACC__)\n"
        "#pragma nv_diagnostic pop\n"
        "#endif\n"
        "#endif  // GR_EMIT_SCALAR_DEFINITIONS\n\n";
    out +=
        "#if !GR_DEVICE_CODE && !defined(__device__)\n"
        "#define __device__\n"
        "#endif\n"
        "#ifndef gr_emit_grad\n"
        "#define gr_emit_grad(g, j, val) ((g)[(j)] = __dadd_rn((g)[(j)], (val)))\n"
        "#endif\n\n";
  }

  void write_function(std::string& out) const {
    constexpr size_t kCol = 56;
    const bool dataset = r_.signature == EmitSignature::Dataset;
    out += "__device__ void " + r_.function +
           (dataset ? "(long long x, double v, double* g, const double* p) {\n" : "(double* g, const double* p) {\n");
    if (dataset) out += "  (void)x;\n  (void)v;\n";

    out += "  // forward: one local per tape node the loss depends on, ascending id\n";
    for (int32_t id = 0; id <= loss_; ++id)
      if (cone_[static_cast<size_t>(id)])
        out += pad("  const double " + t(id) + " = " + fwd_expr(id) + ";", kCol) + "// " + comment_text(fwd_comment(id)) + "\n";
    out += "#ifdef gr_emit_loss\n  gr_emit_loss(" + t(loss_) + ");\n#endif\n  (void)" + t(loss_) + ";\n";

    if (!reached_[static_cast<size_t>(loss_)]) {
      out += "  // backward: no parameter lies upstream of the loss; every gradient is zero\n";
    } else {
      out += "  // backward: the tape's reverse walk (descending id); every slot starts at 0.0 and takes\n"
             "  // each contribution as slot = slot + c; nodes without a parameter upstream get none\n";
      for (int32_t id = loss_; id >= 0; --id)
        if (reached_[static_cast<size_t>(id)]) out += pad("  double " + g(id) + " = 0.0;", kCol) + "// " + comment_text(label(id)) + "\n";
      out += pad("  " + g(loss_) + " = gr_accumulate(" + g(loss_) + ", 1.0);", kCol) + "// " +
             comment_text("seed: d" + label(loss_) + "/d" + label(loss_) + " = 1") + "\n";
      for (int32_t id = loss_; id >= 0; --id) {
        const Node& n = t_.node(id);
        if (!reached_[static_cast<size_t>(id)] || !n.requires_grad) continue;
        for (const Contribution& c : contributions(id))
          out += pad("  " + g(c.to) + " = gr_accumulate(" + g(c.to) + ", " + c.c + ");", kCol) + "// " +
                 comment_text(std::string(op_name(n.op)) + " " + label(id) + " -> " + label(c.to)) + "\n";
      }
    }

    out += "  // one accumulate call per parameter, registration order\n";
    for (size_t j = 0; j < r_.params.size(); ++j) {
      const int32_t id = r_.params[j].id;
      const bool got = id <= loss_ && reached_[static_cast<size_t>(id)];
      out += pad("  gr_emit_grad(g, " + std::to_string(j) + ", " + (got ? g(id) : std::string("0.0")) + ");", kCol) + "// " +
             comment_text(label(id) + (got ? "" : " (backward does not reach it)")) + "\n";
    }
    out += "}\n";
  }
};

}  // namespace

EmitError::EmitError(int32_t node, std::string place, const std::string& what)
    : Error(place.empty() ? what : place + ": " + what), node_(node), place_(std::move(place)), message_(what) {}

bool emit_has_rule(Op op) { return has_rule(op); }

std::string emit_supported_ops() {
  std::string s;
  for (const OpInfo& info : kOps)
    if (info.emit_scalar) s += (s.empty() ? "" : ", ") + std::string(info.name);
  return s;
}

std::string c_double_literal(double v) {
  const uint64_t b = std::bit_cast<uint64_t>(v);
  if (!std::isfinite(v)) {
    const std::string h = hex_bits(b);
    return b >> 63 ? "gr_from_bits((long long)0x" + h + "ULL)" : "gr_from_bits(0x" + h + "LL)";
  }
  const bool neg = (b >> 63) != 0;
  if (v == std::trunc(v) && std::fabs(v) < 0x1p53) {
    const long long i = static_cast<long long>(std::fabs(v));
    return std::string(neg ? "-" : "") + std::to_string(i) + ".0";
  }
  const int e = static_cast<int>((b >> 52) & 0x7ff);
  uint64_t m = b & ((uint64_t{1} << 52) - 1);
  const int exp = e == 0 ? -1022 : e - 1023;
  std::string frac = hex_bits(m).substr(3);  // 13 hex digits of the 52-bit fraction
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  std::string s = neg ? "-0x" : "0x";
  s += e == 0 ? '0' : '1';
  if (!frac.empty()) s += "." + frac;
  s += exp < 0 ? "p-" : "p+";
  s += std::to_string(exp < 0 ? -exp : exp);
  return s;
}

std::string emit_scalar_cuda(const EmitRequest& request) { return Emitter(request).run(); }

}  // namespace gr
