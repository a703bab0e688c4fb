// tape.cpp — the tape's bookkeeping: leaves, node storage, poisoning, episodes, accessors.
// The ops' forward arithmetic is in tape_ops.cpp, their backward rules in backward.cpp.
#include "grad/tape.h"

#include <algorithm>
#include <cstring>

#include "grad/owned.h"

namespace gr {

Tape::Tape(DType real) : real_(real) { nodes_.reserve(256); }

namespace {
// Each value to the nearest float (static_cast rounds to nearest, like __double2float_rn).
void round_to_float(double* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(static_cast<float>(v[i]));
}
}  // namespace

float* Tape::scratch(size_t n) {
  if (scratch_.size() < n) scratch_.resize(n);
  return scratch_.data();
}

void Tape::round_leaf(Var v) {
  const std::span<double> dst = leaf_values(v);
  if (real_ == DType::F32) round_to_float(dst.data(), static_cast<int64_t>(dst.size()));
}
Tape::~Tape() = default;

Var Tape::poison(Op op, const std::string& why) {
  if (ok_) {
    ok_ = false;
    error_ = std::string(op_name(op)) + ": " + why;
  }
  return Var{};
}

bool Tape::usable(Op op, Var v) {
  if (!ok_) return false;
  if (v.id < 0 || v.id >= size()) {
    poison(op, "input is not a variable of this tape (id " + std::to_string(v.id) + ")");
    return false;
  }
  return true;
}

Node* Tape::push(Op op, int32_t a, int32_t b, const Shape& shape_in, bool view_of_a, int32_t c) {
  // A copy first: callers pass an input's shape (nodes_[a].shape), which emplace_back may move.
  const Shape shape = shape_in;
  Node& n = nodes_.emplace_back();
  n.op = op;
  n.a = a;
  n.b = b;
  n.c = c;
  n.shape = shape;
  n.pos_before = arena_.pos();
  const bool have_inputs = (a < 0 || nodes_[a].val) && (b < 0 || nodes_[b].val) && (c < 0 || nodes_[c].val);
  n.requires_grad = (a >= 0 && nodes_[a].requires_grad) || (b >= 0 && nodes_[b].requires_grad);
  if (have_inputs) n.val = view_of_a ? nodes_[a].val : arena_.alloc(shape.numel());
  value_end_ = arena_.pos();
  return &n;
}

double* Tape::keep(Node* n, int64_t count) {
  n->kept = arena_.alloc(count);
  value_end_ = arena_.pos();
  return n->kept;
}

Var Tape::leaf(Op op, const Shape& shape, std::span<const double> values, bool lazy, bool frozen) {
  if (!ok_) return Var{};
  if (shape.rank() == 0) return poison(op, "shape has rank 0; a scalar is shape [1]");
  if (!lazy && static_cast<int64_t>(values.size()) != shape.numel())
    return poison(op, "shape " + shape.str() + " needs " + std::to_string(shape.numel()) + " values, got " +
                          std::to_string(values.size()));
  Node& n = nodes_.emplace_back();
  n.op = op;
  n.shape = shape;
  n.lazy = lazy;
  n.requires_grad = (op == Op::Param && !frozen);
  n.pos_before = arena_.pos();
  if (!lazy) {
    // Big leaves that never change get pages of their own, so drop_value / drop_consts free them.
    if ((op == Op::Const || frozen) && shape.numel() >= kOwnPagesElems) {
      PageBlock block(shape.numel());
      n.val = block.data();
      own_pages_.emplace(size() - 1, std::move(block));
    } else {
      n.val = arena_.alloc(shape.numel());
    }
    std::memcpy(n.val, values.data(), values.size_bytes());
    if (real_ == DType::F32) round_to_float(n.val, shape.numel());
  }
  if (op == Op::Param && !frozen) {  // trainable parameters own a gradient, kept across episodes
    n.grad_pos = arena_.pos();
    n.grad = arena_.alloc(shape.numel());
    std::fill_n(n.grad, shape.numel(), 0.0);
  }
  value_end_ = arena_.pos();
  return Var{size() - 1};
}

Var Tape::param(const Shape& shape, std::span<const double> values) { return leaf(Op::Param, shape, values, false); }
Var Tape::constant(const Shape& shape, std::span<const double> values) {
  return leaf(Op::Const, shape, values, false);
}
Var Tape::frozen_param(const Shape& shape, std::span<const double> values) {
  return leaf(Op::Param, shape, values, false, /*frozen=*/true);
}
Var Tape::constant_lazy(const Shape& shape) { return leaf(Op::Const, shape, {}, true); }

std::span<double> Tape::leaf_values(Var v) {
  const Node& n = node(v);
  if (n.op != Op::Param && n.op != Op::Const)
    throw Error("node " + std::to_string(v.id) + " is a " + std::string(op_name(n.op)) + ", not a param or const");
  if (!n.val) throw Error("node " + std::to_string(v.id) + " has no host storage (lazy or dropped)");
  return {n.val, static_cast<size_t>(n.numel())};
}

void Tape::set_value(Var v, std::span<const double> values) {
  const std::span<double> dst = leaf_values(v);
  if (values.size() != dst.size())
    throw Error("set_value: node " + std::to_string(v.id) + " of shape " + node(v).shape.str() + " needs " +
                std::to_string(dst.size()) + " values, got " + std::to_string(values.size()));
  std::memcpy(dst.data(), values.data(), values.size_bytes());
  round_leaf(v);
}

double* Tape::grad_slot(int32_t id, bool& fresh) {
  Node& n = nodes_[id];
  if (!n.grad) {
    n.grad_pos = arena_.pos();
    n.grad = arena_.alloc(n.numel());
  }
  fresh = !n.touched;
  n.touched = true;
  if (fresh && poison_fresh_.load(std::memory_order_relaxed))
    std::fill_n(n.grad, n.numel(), std::numeric_limits<double>::quiet_NaN());
  return n.grad;
}

std::atomic<bool> Tape::poison_fresh_{false};

double* Tape::ensure_grad(int32_t id) {
  bool fresh = false;
  double* slot = grad_slot(id, fresh);
  if (fresh) zero_owned(slot, nodes_[id].shape);  // by the threads that will accumulate into it
  return slot;
}

void Tape::zero_if_untouched(Node& n) {
  if (n.grad && !n.touched) zero_owned(n.grad, n.shape);
}

void Tape::reset_to(int32_t mark) {
  if (mark < 0 || mark > size())
    throw Error("reset_to: mark " + std::to_string(mark) + " is outside the tape (size " + std::to_string(size()) +
                ")");
  const Arena::Pos to = mark < size() ? nodes_[mark].pos_before : value_end_;
  own_pages_.erase(own_pages_.lower_bound(mark), own_pages_.end());
  nodes_.resize(static_cast<size_t>(mark));  // keeps capacity: no allocation next episode
  for (Node& n : nodes_) {
    if (n.grad && n.grad_pos >= to) n.grad = nullptr;  // its memory is being released
    n.touched = false;  // a weight gradient kept: reads as +0 until backward writes it
  }
  arena_.rewind(to);
  value_end_ = to;
}

void Tape::recover(int32_t mark) {
  reset_to(mark);
  ok_ = true;
  error_.clear();
}

void Tape::drop_consts() {
  for (Node& n : nodes_)
    if (n.op == Op::Const) n.val = nullptr;
  std::erase_if(own_pages_, [&](const auto& e) { return nodes_[static_cast<size_t>(e.first)].op == Op::Const; });
}

const Node& Tape::node(Var v) const {
  if (v.id < 0 || v.id >= size())
    throw Error("variable id " + std::to_string(v.id) + " is not on this tape (size " + std::to_string(size()) +
                (ok_ ? ")" : "; the tape is poisoned: " + error_ + ")"));
  return nodes_[v.id];
}

ConstTensorView Tape::value(Var v) const {
  const Node& n = node(v);
  if (!n.val)
    throw Error("node " + std::to_string(v.id) + " (" + std::string(op_name(n.op)) +
                ") has no host value: it is or depends on a lazy or dropped constant");
  return {n.shape, n.val};
}

ConstTensorView Tape::grad(Var v) {
  node(v);  // checks v
  Node& n = nodes_[static_cast<size_t>(v.id)];
  zero_if_untouched(n);
  if (n.grad) return {n.shape, n.grad};
  if (static_cast<int64_t>(zeros_.size()) < n.numel()) zeros_.assign(static_cast<size_t>(n.numel()), 0.0);
  return {n.shape, zeros_.data()};
}

std::span<double> Tape::param_value(Var p) {
  const Node& n = node(p);
  if (n.op != Op::Param) throw Error("node " + std::to_string(p.id) + " is not a parameter");
  return {n.val, static_cast<size_t>(n.numel())};
}

std::span<double> Tape::param_grad(Var p) {
  node(p);  // checks p
  Node& n = nodes_[static_cast<size_t>(p.id)];
  if (n.op != Op::Param) throw Error("node " + std::to_string(p.id) + " is not a parameter");
  zero_if_untouched(n);
  return {n.grad, static_cast<size_t>(n.numel())};
}

}  // namespace gr
