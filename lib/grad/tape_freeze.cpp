// tape_freeze.cpp — frozen parameters (docs/spec.md "trainable"): a param leaf that requires no
// gradient. requires_grad propagates when a node is pushed, so freezing only means something before
// any op consumed the param; afterwards it is refused rather than silently half-applied.
#include "grad/tape.h"

namespace gr {

void Tape::freeze(Var p) {
  if (node(p).op != Op::Param) throw Error("freeze: node " + std::to_string(p.id) + " is not a parameter");
  for (int32_t id = p.id + 1; id < size(); ++id)
    if (nodes_[static_cast<size_t>(id)].a == p.id || nodes_[static_cast<size_t>(id)].b == p.id)
      throw Error("freeze: parameter " + std::to_string(p.id) + " is already an input of node " + std::to_string(id));
  nodes_[static_cast<size_t>(p.id)].requires_grad = false;
}

}  // namespace gr

namespace gr {

// ---- host copies of unchanging leaves (docs/use-a-model.md "Host copies on devices") ---------------
// A device run holds consts and frozen parameters in device memory and never changes them, so the
// host copies can go between the times the host needs them (evaluation, weight files).

namespace {
bool unchanging(const Node& n) { return (n.op == Op::Const && !n.lazy) || (n.op == Op::Param && !n.requires_grad); }
}  // namespace

size_t Tape::drop_value(Var v) {
  node(v);  // throws for a variable of another tape
  Node& n = nodes_[static_cast<size_t>(v.id)];
  if (!unchanging(n))
    throw Error("drop_value: node " + std::to_string(v.id) + " is not a const or frozen parameter (its value changes)");
  const auto it = own_pages_.find(v.id);
  if (it == own_pages_.end()) return 0;  // in the arena: kept (small, or already dropped)
  const size_t bytes = it->second.bytes();
  own_pages_.erase(it);
  n.val = nullptr;
  return bytes;
}

std::span<double> Tape::restore_value(Var v) {
  node(v);
  Node& n = nodes_[static_cast<size_t>(v.id)];
  if (!unchanging(n))
    throw Error("restore_value: node " + std::to_string(v.id) + " is not a const or frozen parameter");
  if (n.val) return {n.val, static_cast<size_t>(n.numel())};  // never dropped (or kept in the arena)
  PageBlock block(n.numel());
  n.val = block.data();
  own_pages_.emplace(v.id, std::move(block));
  return {n.val, static_cast<size_t>(n.numel())};
}

}  // namespace gr
