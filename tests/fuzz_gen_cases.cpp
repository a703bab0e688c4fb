// fuzz_gen_cases.cpp — the fuzzer's batch, token, image and scalar cases (support/fuzz_gen.h; entry
// points generate_batch, generate_tokens, generate_image and generate(seed, true) in fuzz_gen.cpp).
#include "support/fuzz_gen.h"

namespace gr::fuzz::gen {

// The batch and token cases' tail: from cur (added to the pool), 0..3 random moves, then a loss.
void Gen::moves_to_loss(Val cur) {
  pool_.push_back(cur);
  const int steps = static_cast<int>(pick(4));
  cur = moves(cur, steps);
  c_.graph.losses.push_back(loss(cur).name);
}

// A batch case: a batch-statistics op (batch_norm) over a computed activation, [B, C] (B >= 2) or
// reshaped to [B, C, H, W] (B·H·W >= 2), training on every path (its running statistics are state
// the replay check compares too), a param scale after it, then random moves and a loss.
void Gen::batch_case() {
  const bool four = coin();
  int64_t B = 1 + pick(8);
  const int64_t C = 1 + pick(four ? 3 : 5);
  const int64_t H = four ? 1 + pick(3) : 1;
  const int64_t W = four ? 1 + pick(3) : 1;
  if (B * H * W < 2) B = 2;
  const int64_t F = C * H * W;
  const Val x = leaf(false, {B, F}, -1.5, 1.5);
  pool_.push_back(x);
  Val h = matmul(x, leaf(true, {F, F}, -1, 1));
  const double eps = coin() ? 1e-5 : 0.25, momentum = coin() ? 0.1 : 0.7;
  const double bound = std::sqrt(static_cast<double>(B * H * W));  // |y| <= sqrt(M) (Σ y² <= M per channel)
  static const std::vector<const OpInfo*> batch_ops = table_rows([](const OpInfo& i) { return i.batch(); });  // the table's Class Batch ops
  const std::string name(pick_of(batch_ops)->name);
  const json attrs = {{"eps", eps}, {"momentum", momentum}};
  Val y;
  if (four) {
    const Val r = reshape(h, {B, C, H, W}, false);
    y = reshape(op(name, {r}, attrs, r.shape, bound), {B, F}, coin());
  } else {
    y = op(name, {h}, attrs, h.shape, bound);
  }
  moves_to_loss(op("mul", {y, leaf(true, {F}, 0.5, 1.5)}, json::object(), y.shape, 1.5 * bound));
}

// A token case: integer ids [B, T] (a const, ids drawn in [0, V)) through embedding into a param table
// [V, D], sometimes a second gather of other ids from the same table (a slot that already holds a
// contribution when the first gather's rows land), reshaped to [B, T·D], then random moves and a loss.
void Gen::token_case() {
  const int64_t B = 1 + pick(4), T = 1 + pick(4), V = 2 + pick(5), D = 1 + pick(4);
  const auto ids = [&] {
    Leaf& l = const_leaf({B, T});
    for (double& v : l.values) v = static_cast<double>(pick(V));
    return Val{l.name, {B, T}, static_cast<double>(V)};
  };
  const Val i0 = ids();
  const Val table = leaf(true, {V, D}, -1, 1);
  Val e = op("embedding", {i0, table}, json::object(), {B, T, D}, table.bound);
  if (coin()) {
    const Val i1 = ids();
    e = op("add", {e, op("embedding", {i1, table}, json::object(), {B, T, D}, table.bound)}, json::object(), {B, T, D},
           2 * table.bound);
  }
  moves_to_loss(reshape(e, {B, T * D}, coin()));
}


// ---- image cases: the window ops (conv2d, max_pool2d, avg_pool2d) over x [N, C, H, W] --------------
// Output size of one axis, or 0 when the window does not fit ("same": ceil(in / s)).
static int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t d, const json& pad) {
  if (pad.is_string()) return pad == "same" ? (in + s - 1) / s : (in - d * (k - 1) - 1 >= 0 ? (in - d * (k - 1) - 1) / s + 1 : 0);
  const int64_t e = in + 2 * pad.get<int64_t>() - d * (k - 1) - 1;
  return e >= 0 ? e / s + 1 : 0;
}
Val Gen::window_move(const Val& a) {
  const int64_t N = a.shape[0], C = a.shape[1], H = a.shape[2], W = a.shape[3];
  static const std::vector<const OpInfo*> windows = table_rows([](const OpInfo& i) { return i.window(); });  // the table's window rows (conv2d, the pools, ...)
  const OpInfo& row = *pick_of(windows);
  const int kind = (row.attrs & kAttrConv) ? 0 : 1;  // 0: a conv (a weight, groups, dilation), 1: a pool
  const int64_t kh = 1 + pick(3), kw = 1 + pick(3), sh = 1 + pick(2), sw = 1 + pick(2);
  const int64_t dil = kind == 0 ? 1 + pick(2) : 1;
  const int pad_kind = static_cast<int>(pick(4));  // 0 same, 1 valid, else an int
  json pad;
  if (pad_kind == 0) pad = "same";
  else if (pad_kind == 1) pad = "valid";
  else pad = kind == 0 ? pick(3) : pick(std::min(kh, kw) / 2 + 1);
  int64_t oh = window_out(H, kh, sh, dil, pad), ow = window_out(W, kw, sw, dil, pad);
  if (oh < 1 || ow < 1) pad = "same", oh = (H + sh - 1) / sh, ow = (W + sw - 1) / sw;
  json at = {{"stride", json::array({sh, sw})}, {"padding", pad}};
  if (kind != 0) {
    at["kernel"] = json::array({kh, kw});
    const double bound = a.bound;
    return op(std::string(row.name), {a}, at, {N, C, oh, ow}, bound);  // a pool's value is a mean or a cell
  }
  std::vector<int64_t> gs;  // groups dividing C (and F, drawn as a multiple)
  for (int64_t g = 1; g <= C; ++g)
    if (C % g == 0) gs.push_back(g);
  const int64_t groups = pick_of(gs);
  const int64_t F = groups * (1 + pick(3));
  if (dil > 1) at["dilation"] = dil;
  if (groups > 1) at["groups"] = groups;
  const int64_t K = C / groups * kh * kw;
  const double wb = 1.0 / std::sqrt(static_cast<double>(K));
  const Val w = leaf(!coin(5), {F, C / groups, kh, kw}, -wb, wb);
  std::vector<Val> in{a, w};
  if (coin(3)) in.push_back(leaf(true, {F}, -0.5, 0.5));  // a bias: lowered to reshape + add
  Val y = op(std::string(row.name), in, at, {N, F, oh, ow}, static_cast<double>(K) * a.bound * wb + 0.5);
  return coin() ? un(coin() ? "tanh" : "relu", y) : squash(y, 6.0);
}
void Gen::image_case() {
  const int64_t N = 1 + pick(3), C = 1 + pick(3), H = 2 + pick(7), W = 2 + pick(7);
  Val cur = leaf(coin(3), {N, C, H, W}, -1.5, 1.5);  // sometimes a param: the input's gradient is checked too
  const int steps = 1 + static_cast<int>(pick(3));
  for (int s = 0; s < steps; ++s) {
    cur = window_move(cur);
    if (numel(cur.shape) > 2000) break;
  }
  const int64_t C2 = cur.shape[1], HW = cur.shape[2] * cur.shape[3];
  Val flat;
  if (coin(3)) {  // global average pooling: mean over the spatial axes (one axis at a time)
    flat = reduce("mean", reduce("mean", cur, -1, false), -1, false);
  } else {
    flat = reshape(cur, {N, C2 * HW}, coin());
    if (C2 * HW > 8) flat = squash(matmul(flat, weight(C2 * HW, 1 + pick(4))), 6.0);
  }
  Val l = loss(flat);
  c_.graph.losses.push_back(l.name);
}

// ---- scalar cases ---------------------------------------------------------------------------------
// Every node and parameter holds one element ([1] or [1, 1]); only the emitter's ops.
void Gen::scalar_case() {
  auto one = [&] { return coin() ? Dims{1} : Dims{1, 1}; };
  std::vector<Val> vals{leaf(true, one(), -1, 1), leaf(false, {1}, -1, 1)};
  Val cur = vals[0];
  const int steps = 3 + static_cast<int>(pick(6));
  for (int s = 0; s < steps; ++s) {
    switch (pick(6)) {
      case 0:
      case 1: {
        const OpInfo& info = pick_row(OpClass::Binary, true);
        const OpTest m = op_test(info);
        const std::string o(info.name);
        const bool pos = m.fuzz_b == Dom::Positive;
        Val b;
        if (coin(3)) {
          const Dims shape = one();
          b = leaf(coin(), shape, pos ? 0.5 : -1, 1.5);
        } else {
          b = pick_of(vals);
        }
        if (pos) b = positive(b);
        const Dims s2 = cur.shape.size() == 2 || b.shape.size() == 2 ? Dims{1, 1} : Dims{1};
        const bool swap = m.fuzz_a == Dom::Any && !pos && coin(4);
        cur = squash(op(o, swap ? std::vector<Val>{b, cur} : std::vector<Val>{cur, b}, json::object(), s2,
                        binary_bound(info, cur, b)),
                     30.0);
        break;
      }
      case 2:
      case 3: cur = unary(cur, true); break;
      case 4: {
        const std::string o = coin() ? "sum" : "mean";
        static const int kAxes[] = {0, 1, -1, -9};
        if (cur.shape.size() == 2) {
          const bool keep = coin();
          cur = reduce(o, cur, kAxes[pick(4)], keep);
        } else {
          cur = reduce(o, cur, coin() ? 0 : -9, false);
        }
        break;
      }
      default: cur = reshape(cur, cur.shape.size() == 2 ? Dims{1} : Dims{1, 1}, coin()); break;
    }
    vals.push_back(cur);
  }
  Val l = cur;
  if (coin(3)) l = op("mse", {cur, leaf(false, {1}, -1, 1)}, json::object(), {1}, 0);
  c_.graph.losses.push_back(l.name);
}

}  // namespace gr::fuzz::gen
