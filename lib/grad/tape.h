// tape.h — the define-by-run reverse-mode autodiff tape (docs/design.md §4, docs/numerics.md).
//
// Each op computes its value eagerly and appends one Node; inputs always have smaller ids, so the
// reverse id order is a topological order and backward is one reverse walk. The tape is a
// single-owner arena: it owns every value and gradient; param()/constant() copy the caller's data
// in; value()/grad() hand out borrowed views (invalid after reset_to past the node or ~Tape).
//
// Precision (docs/numerics.md "f32"): a Tape(DType::F32) computes every op in float with the same
// single definitions (kernels/) an f32 device program runs, so its bits are the f32 device's. Its
// storage stays double — every value and gradient is a float held exactly in a double — so the
// API, the files and every caller are the f64 tape's; leaves round what they are given to float.
//
// Errors: a shape mismatch or invalid argument POISONS the tape — ok() turns false, error() keeps
// the first message (naming the op and the shapes), later ops return an invalid Var without
// touching memory, and backward refuses. Accessors called with an invalid Var throw gr::Error.
#pragma once
#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gr_ops_window.h"
#include "grad/arena.h"
#include "grad/page_block.h"
#include "grad/op_table.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace gr {

struct Var {
  int32_t id = -1;
  bool valid() const { return id >= 0; }
  friend bool operator==(Var, Var) = default;
};

inline constexpr int32_t kAllAxes = std::numeric_limits<int32_t>::min();

struct Node {
  Op op = Op::Const;
  bool requires_grad = false;  // a parameter lies in its ancestor cone
  bool touched = false;        // backward has written its gradient this episode; until then the
                               // slot's memory holds anything and reads as all +0 (grad_slot)
  bool lazy = false;           // a constant declared by shape; values come later (device only)
  bool keepdims = false;       // axis reductions
  bool causal = false;         // softmax over [..., Tq, Tk]: query row q sees keys <= q (gr_softmax_causal_lane_*)
  int32_t a = -1, b = -1;      // input node ids (-1: none)
  int32_t c = -1;              // a third input: a Batch op's running variance (b: its running mean)
  int32_t axis = 0;            // normalized axis, or kAllAxes
  double scalar = 0.0;         // adds / muls operand
  double momentum = 0.0;       // a Batch op's running-statistics momentum
  Shape shape;
  int64_t starts[kMaxDims] = {};  // slice window: [starts, starts + shape); dropout: its key (seed, step, training);
                                  // a Batch op: starts[0] = 1 when recorded training (batch statistics)
  gr_window win{};                // window ops (conv2d, pools): the resolved geometry (gr_ops_window.h)
  double* val = nullptr;          // null: no host value (lazy or dropped const, or downstream of one)
  double* grad = nullptr;         // null: no gradient memory (never reached by backward)
  double* kept = nullptr;         // what the forward computed and backward reads instead of computing it
                                  // again: GELU gr_gelu_tanh(x) per element; layer_norm each blocked
                                  // row's r = 1/sqrt(var + eps); cross_entropy each row's max and
                                  // log-sum-exp (row_lanes.h); max_pool2d each window's winner, an
                                  // index into x (−1: all padding). Null: recompute.
  Arena::Pos pos_before;          // arena position before this node's value
  Arena::Pos grad_pos;            // where its gradient was allocated
  int64_t numel() const { return shape.numel(); }
};

// What a dropout node's mask is keyed by (with its node id and element index): the run's seed and
// the step (1-based, as the optimizer's t); outside training dropout is the identity.
struct DropoutKey {
  uint64_t seed = 0, step = 0;
  bool training = false;
};

class Tape {
 public:
  explicit Tape(DType real = DType::F64);
  ~Tape();
  DType real() const { return real_; }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  // ---- leaves -----------------------------------------------------------------------------
  Var param(const Tensor& t) { return param(t.shape(), t.values()); }
  Var param(const Shape& shape, std::span<const double> values);
  Var constant(const Tensor& t) { return constant(t.shape(), t.values()); }
  Var constant(const Shape& shape, std::span<const double> values);
  Var constant_lazy(const Shape& shape);
  // Make a param a frozen leaf: it keeps its value but requires no gradient, so nothing derived
  // from it alone does, and backward skips that work (tape_freeze.cpp). Before any op uses it.
  void freeze(Var param);
  // A parameter frozen from birth: param() + freeze() without the gradient buffer it would never
  // use, its values in pages of its own when large (so drop_value can free them).
  Var frozen_param(const Shape& shape, std::span<const double> values);
  // Overwrite a param's or const's values in place (same element count): minibatch input slots.
  void set_value(Var leaf, std::span<const double> values);
  // Round a leaf's values to the tape's precision in place, after writing them through
  // leaf_values (f64: nothing to do; f32: each to the nearest float, as an f32 upload does).
  void round_leaf(Var leaf);

  // ---- ops (each records one node; mse is a composite of sub, mul, mean) ----------------------
  // Any elementwise op of the table (kernels/gr_op_table.h) by its enum; the named ops below are
  // these with the op spelled out. `s` is the scalar attribute (adds, muls; ignored otherwise).
  Var unary_op(Op op, Var x, double s = 0.0);
  Var binary_op(Op op, Var a, Var b);
  Var add(Var a, Var b);
  Var sub(Var a, Var b);
  Var mul(Var a, Var b);
  Var div(Var a, Var b);
  Var neg(Var x);
  Var adds(Var x, double s);
  Var muls(Var x, double s);
  Var relu(Var x);
  Var sigmoid(Var x);
  Var tanh(Var x);
  Var exp(Var x);
  Var log(Var x);
  Var sqrt(Var x);
  Var sum(Var x);
  Var mean(Var x);
  Var sum(Var x, int64_t axis, bool keepdims = false);
  Var mean(Var x, int64_t axis, bool keepdims = false);
  // max over all elements, or along `axis`; the gradient goes to the first largest element.
  Var max(Var x);
  Var max(Var x, int64_t axis, bool keepdims = false);
  // Any fold reduction of the table (Class Reduction, Fwd `fold`: max, ...) by its enum, over all
  // elements (axis kAllAxes) or along `axis`; its rule is gr_<stem>_fold_fwd / _bwd (gr_ops_lane.h).
  Var fold_op(Op op, Var x, int64_t axis = kAllAxes, bool keepdims = false);
  Var matmul(Var a, Var b);
  Var bmm(Var a, Var b);
  Var transpose(Var x);
  Var reshape(Var x, std::span<const int64_t> shape);
  // causal: the last two axes are (query, key) and row q sees keys <= q (axis must be the last;
  // masked entries are exactly 0 in the value and get no gradient).
  Var softmax(Var x, int64_t axis = -1, bool causal = false);
  Var log_softmax(Var x, int64_t axis = -1);
  Var softmax_cross_entropy(Var logits, Var targets);
  // Any row op of the table (Class Row: y = f(x) per row of the last axis) by its enum, with its
  // eps > 0; its rule is gr_<stem>_lane_fwd / _bwd (kernels/gr_ops_lane.h).
  Var row_op(Op op, Var x, double eps = 1e-5);
  // layer_norm over the last axis (no affine), eps > 0 inside the square root.
  Var layer_norm(Var x, double eps = 1e-5) { return row_op(Op::LayerNorm, x, eps); }
  // Mean over rows of −log_softmax(logits)[id]: logits [N,C], class ids [N] or [N,1] (integers in
  // [0, C); others give NaN). The ids get no gradient.
  Var cross_entropy(Var logits, Var ids);
  // Dropout with rate in [0, 1): the mask of gr_ops_lane.h keyed by dropout_key() as it is when the
  // node is recorded (the node keeps it for its backward); the identity when not training.
  Var dropout(Var x, double rate);
  void set_dropout_key(const DropoutKey& key) { dropout_key_ = key; }
  const DropoutKey& dropout_key() const { return dropout_key_; }
  // Any batch-statistics op of the table (Class Batch: batch_norm) by its enum: x [N,C] or [N,C,H,W]
  // normalized per channel (gr_ops_batch.h); rm, rv: its running statistics, [C] leaves without a
  // gradient. Training (dropout_key().training when recorded): batch statistics; else rm and rv.
  Var batch_op(Op op, Var x, Var rm, Var rv, double eps = 1e-5, double momentum = 0.1);
  Var batch_norm(Var x, Var rm, Var rv, double eps = 1e-5, double momentum = 0.1) {
    return batch_op(Op::BatchNorm, x, rm, rv, eps, momentum);
  }
  // After a training step's forward: the running statistics of Batch node `node` (recorded
  // training) take one update from its input's batch (gr_<stem>_chan_update), written into its
  // leaves b and c in place. Nothing for a node recorded outside training.
  void update_running_stats(Var node);
  Var slice(Var x, std::span<const int64_t> starts, std::span<const int64_t> stops);
  Var concat(Var a, Var b, int64_t axis);
  Var mse(Var y, Var target);
  // The window ops (Class Window, gr_ops_window.h) over NCHW: conv2d x [N,C,H,W] with w [F, C/groups,
  // KH, KW] → [N,F,OH,OW] (no bias: add one reshaped to [F,1,1]); max_pool2d / avg_pool2d (count_include_pad)
  // → [N,C,OH,OW]. "same" pads to OH = ceil(H / stride), the smaller half at the top/left (tape_window.cpp).
  Var window_op(Op op, Var x, Var w, const WindowAttrs& attrs);
  Var conv2d(Var x, Var w, const WindowAttrs& attrs = {}) { return window_op(Op::Conv2d, x, w, attrs); }
  Var max_pool2d(Var x, const WindowAttrs& attrs) { return window_op(Op::MaxPool2d, x, Var{}, attrs); }
  Var avg_pool2d(Var x, const WindowAttrs& attrs) { return window_op(Op::AvgPool2d, x, Var{}, attrs); }
  // embedding: integer ids S (a const or data; refused when they depend on a parameter) and a table
  // [V,D] → S + [D], row ids[p] of the table per position; an id that is not an integer in [0, V)
  // gives a NaN row and no gradient (kernels/gr_ops_gather.h, tape_gather.cpp).
  Var embedding(Var ids, Var table);

  // ---- episodes ---------------------------------------------------------------------------
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  int32_t mark() const { return size(); }
  // Drop every node at id >= mark and un-touch the gradients that remain: they read as zero
  // (grad, param_grad) until the next backward writes them.
  void reset_to(int32_t mark);
  // Abandon a failed episode: reset_to(mark) and clear the poisoning. Poisoned ops append no
  // nodes, so every node that remains is good.
  void recover(int32_t mark);
  // Free the host values of every constant (after a device capture uploaded them).
  void drop_consts();
  // Host copies of one unchanging leaf (a const or a frozen parameter) a device holds
  // (tape_freeze.cpp): drop_value frees the leaf's own pages (leaves of at least kOwnPagesElems
  // elements have them) and returns the bytes freed; a smaller leaf lives in the arena and is kept
  // (0). While dropped, the leaf has no host value: ops on it record no values. restore_value gives
  // it fresh pages, uninitialized, for the caller to fill (from the device, bit for bit).
  size_t drop_value(Var leaf);
  std::span<double> restore_value(Var leaf);
  bool dropped(Var leaf) const { return node(leaf).val == nullptr && !node(leaf).lazy; }
  // The bytes of a leaf's own pages (what drop_value would free now), else 0.
  size_t own_pages_bytes(Var leaf) const {
    const auto it = own_pages_.find(leaf.id);
    return it == own_pages_.end() ? 0 : it->second.bytes();
  }
  static constexpr int64_t kOwnPagesElems = int64_t(1) << 16;
  // dL/dloss = 1 (every element), one reverse walk. Non-parameter gradients restart from zero;
  // parameter gradients accumulate across calls until reset_to. False (and poisoned) on failure.
  bool backward(Var loss);

  // ---- access -----------------------------------------------------------------------------
  const Node& node(Var v) const;
  const Node& node(int32_t id) const { return node(Var{id}); }
  ConstTensorView value(Var v) const;
  // The gradient; zeros when backward never reached v (const-only branches have no memory).
  // Test hook, harsher than the default: fill every fresh gradient slot with NaN before a backward
  // rule gets it, so a rule that reads a fresh slot or leaves an element unwritten shows.
  static void poison_fresh_gradients(bool on) { poison_fresh_.store(on, std::memory_order_relaxed); }
  ConstTensorView grad(Var v);
  double scalar(Var v) const { return value(v).data[0]; }
  // A param's or const's storage, written in place (minibatch input slots are filled this way).
  std::span<double> leaf_values(Var leaf);
  // Parameter storage for the optimizer: the live value and gradient, updated in place.
  std::span<double> param_value(Var p);
  std::span<double> param_grad(Var p);
  const Arena& arena() const { return arena_; }

 private:
  template <class R>
  friend struct RuleContext;  // backward rules (rule_context.h, binary_rules.h, backward.cpp), R the arithmetic type
  template <class R>
  friend struct BinaryRules;
  template <class R>
  friend struct TapeRules;
  // f(R{}) with R = double or float, the tape's arithmetic type.
  template <class F>
  decltype(auto) by_real(F&& f) {
    return real_ == DType::F32 ? f(float{}) : f(double{});
  }
  // Float working copies for the ops whose kernels take pointers (lanes, rows, matmul) on an f32
  // tape: grown once, so the steady state allocates nothing.
  float* scratch(size_t n);
  Var poison(Op op, const std::string& why);
  bool usable(Op op, Var v);
  // `view_of_a`: the node's value is a's memory, not a copy (a reshape of an op's output: a
  // recorded op's value never changes, and reset_to releases a with or before the view).
  Node* push(Op op, int32_t a, int32_t b, const Shape& shape, bool view_of_a = false, int32_t c = -1);
  // GELU, keeping its tanh for backward (tape_ops.cpp).
  Var gelu_keeping_tanh(Var x);
  // n's kept block (Node::kept): `count` elements after its value, released with it by reset_to.
  double* keep(Node* n, int64_t count);
  // The gradient slot of node `id`, marked touched. ensure_grad returns it ready to accumulate
  // into (an untouched slot is zeroed first); grad_slot leaves an untouched slot as it is and sets
  // `fresh`: the caller must then write every element, as `+0 + c` (gr_accumulate onto +0, the
  // same bits as accumulating onto a zeroed slot), without reading it.
  double* ensure_grad(int32_t id);
  double* grad_slot(int32_t id, bool& fresh);
  static std::atomic<bool> poison_fresh_;
  // An untouched slot that someone reads (grad, param_grad) is zeroed first.
  void zero_if_untouched(Node& n);
  Var leaf(Op op, const Shape& shape, std::span<const double> values, bool lazy, bool frozen = false);
  template <class R, class F>
  Var binary(Op op, Var a, Var b, F f);
  template <class R, class F>
  Var unary(Op op, Var x, double s, F f);
  template <class R>
  void reduce_values(Node& n, const double* px, const Shape& in);
  template <class R>
  void window_values(Node& n);
  template <class R>
  void window_backward(const Node& n, const double* g);  // called by backward.cpp's rules
  template <class R>
  void embedding_backward(const Node& n, const double* g);  // called by backward.cpp's rules
  template <class R>
  void lane_values(Node& n, const double* px, int ax);
  Var reduce(Op op, Var x, int64_t axis, bool keepdims);
  Var lane(Op op, Var x, int64_t axis, bool causal = false);

  std::vector<Node> nodes_;
  Arena arena_;
  Arena::Pos value_end_;  // arena position after the last pushed value
  std::map<int32_t, PageBlock> own_pages_;  // node id → the values of a big const or frozen param
  std::vector<double> zeros_;  // backing for grad() of unreached nodes
  std::vector<float> scratch_;  // f32 working copies (scratch())
  std::vector<double> win_tmp_;  // window ops: the pools' scratch and conv2d's dW (tape_window.cpp)
  DType real_ = DType::F64;
  bool ok_ = true;
  std::string error_;
  DropoutKey dropout_key_;
};

}  // namespace gr
