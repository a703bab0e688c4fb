// rule_context.h — private to lib/grad: what every backward rule of the CPU tape works with (backward.cpp's
// TapeRules and the rule families it derives from: binary_rules.h): the tape, the node whose rule runs,
// its output gradient, and the gradient slots of its inputs. The accumulation contract is backward.cpp's.
#pragma once
#include <cstdint>

#include "grad/tape.h"
#include "grad/tape_real.h"

namespace gr {

// The context's names for a rule family that derives from it through a dependent base (binary_rules.h,
// backward.cpp), so its rules read them unqualified.
#define GR_RULE_CONTEXT_NAMES(Base) \
  using typename Base::Slot;        \
  using Base::g;                    \
  using Base::in;                   \
  using Base::n;                    \
  using Base::slot_of;              \
  using Base::t;                    \
  using Base::wants;                \
  using Base::write_range

template <class R>
struct RuleContext {
  Tape& t;
  const Node& n;
  const double* g;  // dL/d(this node's output)

  bool wants(int32_t id) const { return id >= 0 && t.nodes_[id].requires_grad; }
  const Node& in(int32_t id) const { return t.nodes_[id]; }

  // A rule that writes each element of a slot exactly once takes it with `slot_of(id)`: a fresh one
  // (untouched this episode, its memory not zeroed) is then written as +0 + c (first_into), the
  // bits of accumulating onto +0, with no zeroing pass before and no read.
  struct Slot {
    double* p = nullptr;
    bool fresh = false;
    explicit operator bool() const { return p != nullptr; }
  };
  Slot slot_of(int32_t id) {
    if (!wants(id)) return {};
    Slot s;
    s.p = t.grad_slot(id, s.fresh);
    return s;
  }
  // slot[e] (+)= c(e) for e in [lo, hi), as one loop per case so each vectorizes.
  template <class C>
  static void write_range(const Slot& s, int64_t lo, int64_t hi, C c) {
    if (s.fresh)
      for (int64_t e = lo; e < hi; ++e) first_into(s.p[e], c(e));
    else
      for (int64_t e = lo; e < hi; ++e) accumulate_into(s.p[e], c(e));
  }
};

}  // namespace gr
