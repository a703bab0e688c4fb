// gr_op_table.h — THE op table: one row per op, and every path derives the op from its row.
//
// GR_OP_TABLE(X) calls X once per op, in enum order. Consumers define X to pick the columns they
// need: the op enum and OpInfo (lib/grad/op_table.h), the tape's forward/backward dispatch
// (lib/grad), the per-node device kernels (kernels/device/gr_node_kernels.cuh), the replay kernel
// names (lib/replay), the fusion planner's classes and the fused code text (lib/fuse), the scalar
// emitter's expressions (lib/emit), the spec parser (lib/spec) and the test sweeps (tests/). The
// header is plain preprocessor text, so the host compiler and NVRTC both read it.
//
// Adding an elementwise op = one row here + gr_<stem>_fwd / gr_<stem>_bwd[_a,_b] in gr_ops_scalar.h.
// Adding a row op (Class Row: layer_norm) = one row here + gr_<stem>_lane_fwd / _lane_bwd in gr_ops_lane.h.
// Adding a batch-statistics op (Class Batch: batch_norm) = one row here + gr_<stem>_chan_fwd / _chan_bwd /
// _chan_update in gr_ops_batch.h (and its state's names: lib/spec/program.cpp).
// Adding a fold reduction (Class Reduction with Fwd `fold`: max) = one row here + gr_<stem>_fold_fwd /
// gr_<stem>_fold_bwd in gr_ops_lane.h.
// Every consumer reaches these classes through GR_OP_IF_<CLASS>_<Class> / GR_OP_IF_FOLD below, so no
// other file names the op (scripts/check-new-op adds softsign, rms_norm and min that way). Table-driven:
// Unary, Binary, Row and the fold reductions. Still hand-written per op in the consumers' switches:
// sum and mean (Reduction, Fwd none: the serial sum, the fused SumAll stage, the emitter's sums),
// Contraction, Lane (softmax, log_softmax, the losses), Movement, Random.
//
// X(Enum, "name", arity, Class, attrs, stem, Fwd, BwdA, BwdB, Shape, Fusion, Emit, DomA, DomB, "torch", "onnx")
//   Class   Leaf | Unary | Binary (the elementwise ops) | Reduction (Fwd `fold`: a fold reduction, one value per
//           lane of the reduced axis or of all elements, output shape by axis/keepdims; its rule is the pair
//           gr_<stem>_fold_fwd(x, len, stride) → y / gr_<stem>_fold_bwd(g, x, y, slot, len, stride) (adds
//           into slot) in gr_ops_lane.h, the per-node kernels grk_<stem>_fwd / _bwd generated from the row;
//           Fwd `none`: sum, mean, by hand) | Contraction | Lane | Movement |
//           Random (dropout: a counter-based mask keyed by the tape's dropout key, gr_ops_lane.h) |
//           Row (a row op: one input, y = f(x) per row of the last axis, the scalar attribute s
//           (eps, kAttrEps) > 0, output shape = input shape; its rule is the pair
//           gr_<stem>_lane_fwd(x, y, len, stride, s) / gr_<stem>_lane_bwd(g, x, y, slot, len, stride, s)
//           in gr_ops_lane.h, the per-node kernels grk_<stem>_fwd / _bwd are generated from the row)
//           Batch (a batch-statistics op: one input x [N,C] or [N,C,H,W] and its state, the running
//           statistics "<id>.running_mean" / "<id>.running_var" [C], non-trainable leaves the tape node
//           holds as inputs b and c; statistics per channel over N (and H, W); the training flag of the
//           tape's key picks batch (training) or running statistics (eval); eps and momentum attributes;
//           its rule is gr_<stem>_chan_fwd / _chan_bwd / _chan_update in gr_ops_batch.h, the per-node
//           kernels grk_<stem>_fwd / _bwd / _update are generated from the row)
//   attrs   kAttr* bits (lib/grad/op_table.h): Scalar (adds, muls), Axis, Keepdims, Shape, Window, Eps, Rate, Momentum,
//           Causal (softmax: "causal": true masks the last two axes, query row i sees keys <= i)
//   stem    names the scalar functions gr_<stem>_fwd, gr_<stem>_bwd (unary) / _bwd_a, _bwd_b
//           (binary) in gr_ops_scalar.h and EVERY per-node kernel of the op: grk_<stem>_<part>
//           (lib/replay builds each name from the stem; no kernel name is written out anywhere else)
//   Fwd, BwdA, BwdB   the arguments of those functions, in order, '_'-separated; the saved values a
//           backward reads are its letters after g:
//             g = dL/dy   a = the first input (x of a unary op)   b = the second input
//             y = the op's output   s = the op's scalar attribute   none = no such function
//           (a Reduction row's Fwd is `fold` for a fold reduction, its rule pair gr_<stem>_fold_fwd/_bwd)
//   Shape   Leaf | Same | Broadcast | Reduce | Matmul | Bmm | Transpose | Reshape | Slice | Concat | Loss | Window |
//           Gather (embedding: integer ids S (a const or data: never a gradient) and a table [V,D] → S + [D];
//           its rules gr_embedding_* in gr_ops_gather.h)
//   Fusion  how the megakernel planner may fuse it (docs/fusion.md):
//             Elementwise  row-local over [B, C] (b-side: same shape, a [C] column or one element);
//                          a serial stage when every operand holds one element
//             Matmul       row-local x·W with a leaf W      Lane  row-local over the last axis
//             Reduce       serial over all axes; a row segment's head
//             LaneLoss     serial (softmax cross-entropy); a row segment's head
//             Copy         a serial stage when it holds one element      Opaque  never fused
//   Emit    Yes when the scalar CUDA-C emitter emits it (every node one element)
//   DomA, DomB  where the op is defined and smooth, for tests and finite differences:
//             Any | Positive | AwayFromZero (a kink or pole at 0) | OneHot | ClassId (integer class ids,
//             a constant) | None (no such input)
//   torch   the op in PyTorch over tensors a, b and float s ("" when the oracle maps it by hand); the
//           PyTorch oracle and `export --format torch` use it for the elementwise and Row ops; a fold
//           reduction's is over a, dim d and keepdim k (all axes: a flattened, d 0, k False, then [1]);
//           its gradient must go where the fold's backward sends it (max: torch.max's index)
//   onnx    the opset-13 ONNX operator of an elementwise row or a fold reduction (ReduceMax: axes an
//           attribute; all axes: keepdims 0, reshaped to [1]) (adds/muls/pow: its scalar becomes an
//           initializer input); "" when there is none: `export --format onnx` refuses the node, named
#pragma once

// clang-format off
#define GR_OP_TABLE(X) \
  X(Param,               "param",                 0, Leaf,        kAttrNone,                 param,       none, none,  none,  Leaf,      Opaque,      Yes, None,         None,   "", "") \
  X(Const,               "const",                 0, Leaf,        kAttrNone,                 constant,    none, none,  none,  Leaf,      Opaque,      Yes, None,         None,   "", "") \
  X(Add,                 "add",                   2, Binary,      kAttrNone,                 add,         a_b,  g,     g,     Broadcast, Elementwise, Yes, Any,          Any,    "a + b", "Add") \
  X(Sub,                 "sub",                   2, Binary,      kAttrNone,                 sub,         a_b,  g,     g,     Broadcast, Elementwise, Yes, Any,          Any,    "a - b", "Sub") \
  X(Mul,                 "mul",                   2, Binary,      kAttrNone,                 mul,         a_b,  g_b,   g_a,   Broadcast, Elementwise, Yes, Any,          Any,    "a * b", "Mul") \
  X(Div,                 "div",                   2, Binary,      kAttrNone,                 div,         a_b,  g_b,   g_y_b, Broadcast, Elementwise, Yes, Any,          AwayFromZero, "a / b", "Div") \
  X(Neg,                 "neg",                   1, Unary,       kAttrNone,                 neg,         a,    g,     none,  Same,      Elementwise, Yes, Any,          None,   "-a", "Neg") \
  X(AddScalar,           "adds",                  1, Unary,       kAttrScalar,               adds,        a_s,  g,     none,  Same,      Elementwise, Yes, Any,          None,   "a + s", "Add") \
  X(MulScalar,           "muls",                  1, Unary,       kAttrScalar,               muls,        a_s,  g_s,   none,  Same,      Elementwise, Yes, Any,          None,   "a * s", "Mul") \
  X(Relu,                "relu",                  1, Unary,       kAttrNone,                 relu,        a,    g_a,   none,  Same,      Elementwise, Yes, AwayFromZero, None,   "torch.relu(a)", "Relu") \
  X(Sigmoid,             "sigmoid",               1, Unary,       kAttrNone,                 sigmoid,     a,    g_y,   none,  Same,      Elementwise, Yes, Any,          None,   "torch.sigmoid(a)", "Sigmoid") \
  X(Tanh,                "tanh",                  1, Unary,       kAttrNone,                 tanh,        a,    g_y,   none,  Same,      Elementwise, Yes, Any,          None,   "torch.tanh(a)", "Tanh") \
  X(Exp,                 "exp",                   1, Unary,       kAttrNone,                 exp,         a,    g_y,   none,  Same,      Elementwise, Yes, Any,          None,   "torch.exp(a)", "Exp") \
  X(Log,                 "log",                   1, Unary,       kAttrNone,                 log,         a,    g_a,   none,  Same,      Elementwise, Yes, Positive,     None,   "torch.log(a)", "Log") \
  X(Sqrt,                "sqrt",                  1, Unary,       kAttrNone,                 sqrt,        a,    g_y,   none,  Same,      Elementwise, Yes, Positive,     None,   "torch.sqrt(a)", "Sqrt") \
  X(Abs,                 "abs",                   1, Unary,       kAttrNone,                 abs,         a,    g_a,   none,  Same,      Elementwise, Yes, AwayFromZero, None,   "torch.abs(a)", "Abs") \
  X(Pow,                 "pow",                   1, Unary,       kAttrScalar,               pow,         a_s,  g_a_s, none,  Same,      Elementwise, Yes, Positive,     None,   "torch.pow(a, s)", "Pow") \
  X(Sin,                 "sin",                   1, Unary,       kAttrNone,                 sin,         a,    g_a,   none,  Same,      Elementwise, Yes, Any,          None,   "torch.sin(a)", "Sin") \
  X(Cos,                 "cos",                   1, Unary,       kAttrNone,                 cos,         a,    g_a,   none,  Same,      Elementwise, Yes, Any,          None,   "torch.cos(a)", "Cos") \
  X(Gelu,                "gelu",                  1, Unary,       kAttrNone,                 gelu,        a,    g_a,   none,  Same,      Elementwise, Yes, Any,          None,   "torch.nn.functional.gelu(a, approximate='tanh')", "") \
  X(BceWithLogits,       "bce_with_logits",       2, Binary,      kAttrNone,                 bce_logits,  a_b,  g_a_b, g_a,   Broadcast, Elementwise, Yes, Any,          Any,    "torch.nn.functional.binary_cross_entropy_with_logits(*torch.broadcast_tensors(a, b), reduction='none')", "") \
  X(Sum,                 "sum",                   1, Reduction,   kAttrAxis | kAttrKeepdims, sum,         none, none,  none,  Reduce,    Reduce,      Yes, Any,          None,   "", "") \
  X(Mean,                "mean",                  1, Reduction,   kAttrAxis | kAttrKeepdims, mean,        none, none,  none,  Reduce,    Reduce,      Yes, Any,          None,   "", "") \
  X(Max,                 "max",                   1, Reduction,   kAttrAxis | kAttrKeepdims, max,         fold, none,  none,  Reduce,    Opaque,      No,  Any,          None,   "torch.max(a, dim=d, keepdim=k)[0]", "ReduceMax") \
  X(Matmul,              "matmul",                2, Contraction, kAttrNone,                 matmul,      none, none,  none,  Matmul,    Matmul,      No,  Any,          Any,    "", "") \
  X(Bmm,                 "bmm",                   2, Contraction, kAttrNone,                 bmm,         none, none,  none,  Bmm,       Opaque,      No,  Any,          Any,    "", "") \
  X(Transpose,           "transpose",             1, Movement,    kAttrNone,                 transpose,   none, none,  none,  Transpose, Opaque,      No,  Any,          None,   "", "") \
  X(Reshape,             "reshape",               1, Movement,    kAttrShape,                reshape,     none, none,  none,  Reshape,   Copy,        Yes, Any,          None,   "", "") \
  X(Slice,               "slice",                 1, Movement,    kAttrWindow,               slice,       none, none,  none,  Slice,     Opaque,      No,  Any,          None,   "", "") \
  X(Concat,              "concat",                2, Movement,    kAttrAxis,                 concat,      none, none,  none,  Concat,    Opaque,      No,  Any,          Any,    "", "") \
  X(Softmax,             "softmax",               1, Lane,        kAttrAxis | kAttrCausal,   softmax,     none, none,  none,  Same,      Lane,        No,  Any,          None,   "", "") \
  X(LogSoftmax,          "log_softmax",           1, Lane,        kAttrAxis,                 log_softmax, none, none,  none,  Same,      Lane,        No,  Any,          None,   "", "") \
  X(SoftmaxCrossEntropy, "softmax_cross_entropy", 2, Lane,        kAttrNone,                 sce,         none, none,  none,  Loss,      LaneLoss,    No,  Any,          OneHot, "", "") \
  X(LayerNorm,           "layer_norm",            1, Row,         kAttrEps,                  layer_norm,  none, none,  none,  Same,      Lane,        No,  Any,          None,   "(a - a.mean(-1, keepdim=True)) / torch.sqrt(((a - a.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + s)", "") \
  X(CrossEntropy,        "cross_entropy",         2, Lane,        kAttrNone,                 ce,          none, none,  none,  Loss,      Opaque,      No,  Any,          ClassId, "", "") \
  X(Dropout,             "dropout",               1, Random,      kAttrRate,                 dropout,     none, none,  none,  Same,      Opaque,      No,  Any,          None,   "", "") \
  X(BatchNorm,           "batch_norm",            1, Batch,       kAttrEps | kAttrMomentum,  batch_norm,  none, none,  none,  Same,      Opaque,      No,  Any,          None,   "", "") \
  X(Conv2d,              "conv2d",                2, Window,      kAttrConv,                 conv2d,      win,  win,   win,   Window,    Opaque,      No,  Any,          Any,    "torch.nn.functional.conv2d(a, b, stride=st, dilation=dl, groups=gp)", "") \
  X(MaxPool2d,           "max_pool2d",            1, Window,      kAttrPool,                 max_pool2d,  win,  win,   none,  Window,    Opaque,      No,  Any,          None,   "torch.nn.functional.max_pool2d(a, k, stride=st, dilation=dl)", "") \
  X(AvgPool2d,           "avg_pool2d",            1, Window,      kAttrPool,                 avg_pool2d,  win,  win,   none,  Window,    Opaque,      No,  Any,          None,   "torch.nn.functional.avg_pool2d(a, k, stride=st)", "") \
  X(Embedding,           "embedding",             2, Movement,    kAttrNone,                 embedding,   none, none,  none,  Gather,    Opaque,      No,  ClassId,      Any,    "torch.nn.functional.embedding(a.long(), b)", "Gather")
// clang-format on

// ---- selecting rows by class: GR_OP_IF_<CLASS>_<Class>(...) keeps its arguments for that class only --
// (GR_OP_IF_NOT_ROW_<Class> keeps them for every other class: exhaustive switches over ops group the rest)
#define GR_OP_IF_UNARY_Leaf(...)
#define GR_OP_IF_UNARY_Unary(...) __VA_ARGS__
#define GR_OP_IF_UNARY_Binary(...)
#define GR_OP_IF_UNARY_Reduction(...)
#define GR_OP_IF_UNARY_Contraction(...)
#define GR_OP_IF_UNARY_Lane(...)
#define GR_OP_IF_UNARY_Movement(...)
#define GR_OP_IF_UNARY_Random(...)
#define GR_OP_IF_UNARY_Row(...)
#define GR_OP_IF_UNARY_Batch(...)
#define GR_OP_IF_UNARY_Window(...)
#define GR_OP_IF_BINARY_Leaf(...)
#define GR_OP_IF_BINARY_Unary(...)
#define GR_OP_IF_BINARY_Binary(...) __VA_ARGS__
#define GR_OP_IF_BINARY_Reduction(...)
#define GR_OP_IF_BINARY_Contraction(...)
#define GR_OP_IF_BINARY_Lane(...)
#define GR_OP_IF_BINARY_Movement(...)
#define GR_OP_IF_BINARY_Random(...)
#define GR_OP_IF_BINARY_Row(...)
#define GR_OP_IF_BINARY_Batch(...)
#define GR_OP_IF_BINARY_Window(...)
#define GR_OP_IF_ROW_Leaf(...)
#define GR_OP_IF_ROW_Unary(...)
#define GR_OP_IF_ROW_Binary(...)
#define GR_OP_IF_ROW_Reduction(...)
#define GR_OP_IF_ROW_Contraction(...)
#define GR_OP_IF_ROW_Lane(...)
#define GR_OP_IF_ROW_Movement(...)
#define GR_OP_IF_ROW_Random(...)
#define GR_OP_IF_ROW_Row(...) __VA_ARGS__
#define GR_OP_IF_ROW_Batch(...)
#define GR_OP_IF_ROW_Window(...)
// GR_OP_IF_FOLD(cls, fwd, ...) keeps its arguments for the fold reductions: the Class Reduction rows
// whose Fwd column is `fold` (max, ...); sum and mean (Fwd none) have their own plans (see above).
#define GR_OP_IF_REDUCTION_Leaf(...)
#define GR_OP_IF_REDUCTION_Unary(...)
#define GR_OP_IF_REDUCTION_Binary(...)
#define GR_OP_IF_REDUCTION_Reduction(...) __VA_ARGS__
#define GR_OP_IF_REDUCTION_Contraction(...)
#define GR_OP_IF_REDUCTION_Lane(...)
#define GR_OP_IF_REDUCTION_Movement(...)
#define GR_OP_IF_REDUCTION_Random(...)
#define GR_OP_IF_REDUCTION_Row(...)
#define GR_OP_IF_REDUCTION_Batch(...)
#define GR_OP_IF_REDUCTION_Window(...)
#define GR_OP_IF_FOLD_FWD_fold(...) __VA_ARGS__
#define GR_OP_IF_FOLD_FWD_none(...)
#define GR_OP_IF_FOLD(cls, fwd, ...) GR_OP_IF_REDUCTION_##cls(GR_OP_IF_FOLD_FWD_##fwd(__VA_ARGS__))
// GR_OP_IF_NOT_FOLD(cls, fwd, ...) keeps them for every other row (exhaustive switches over ops).
#define GR_OP_IF_NOT_REDUCTION_Leaf(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Unary(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Binary(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Reduction(...)
#define GR_OP_IF_NOT_REDUCTION_Contraction(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Lane(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Movement(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Random(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Row(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Batch(...) __VA_ARGS__
#define GR_OP_IF_NOT_REDUCTION_Window(...) __VA_ARGS__
#define GR_OP_IF_NOT_FOLD_FWD_fold(...)
#define GR_OP_IF_NOT_FOLD_FWD_none(...) __VA_ARGS__
#define GR_OP_IF_NOT_FOLD(cls, fwd, ...) \
  GR_OP_IF_NOT_REDUCTION_##cls(__VA_ARGS__) GR_OP_IF_REDUCTION_##cls(GR_OP_IF_NOT_FOLD_FWD_##fwd(__VA_ARGS__))
#define GR_OP_IF_NOT_ROW_Leaf(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Unary(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Binary(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Reduction(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Contraction(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Lane(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Movement(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Random(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Row(...)
#define GR_OP_IF_NOT_ROW_Batch(...) __VA_ARGS__

// GR_OP_IF_BATCH_<Class>(...) keeps its arguments for the batch-statistics rows (Class Batch: batch_norm).
#define GR_OP_IF_BATCH_Leaf(...)
#define GR_OP_IF_BATCH_Unary(...)
#define GR_OP_IF_BATCH_Binary(...)
#define GR_OP_IF_BATCH_Reduction(...)
#define GR_OP_IF_BATCH_Contraction(...)
#define GR_OP_IF_BATCH_Lane(...)
#define GR_OP_IF_BATCH_Movement(...)
#define GR_OP_IF_BATCH_Random(...)
#define GR_OP_IF_BATCH_Row(...)
#define GR_OP_IF_BATCH_Batch(...) __VA_ARGS__
#define GR_OP_IF_NOT_ROW_Window(...) __VA_ARGS__

// GR_OP_IF_WINDOW_<Class>(...) keeps its arguments for the window ops (Class Window: conv2d and the
// pools over NCHW, gr_ops_window.h); GR_OP_IF_WIN_BWDB_<BwdB> for those with a second input (conv2d's w).
#define GR_OP_IF_WINDOW_Leaf(...)
#define GR_OP_IF_WINDOW_Unary(...)
#define GR_OP_IF_WINDOW_Binary(...)
#define GR_OP_IF_WINDOW_Reduction(...)
#define GR_OP_IF_WINDOW_Contraction(...)
#define GR_OP_IF_WINDOW_Lane(...)
#define GR_OP_IF_WINDOW_Movement(...)
#define GR_OP_IF_WINDOW_Random(...)
#define GR_OP_IF_WINDOW_Row(...)
#define GR_OP_IF_WINDOW_Batch(...)
#define GR_OP_IF_WINDOW_Window(...) __VA_ARGS__
#define GR_OP_IF_WIN_BWDB_win(...) __VA_ARGS__
#define GR_OP_IF_WIN_BWDB_none(...)
#define GR_OP_IF_BATCH_Window(...)

// GR_OP_IF_EMIT_NO_<Emit>(...) keeps its arguments for the rows whose Emit column is No (the scalar
// emitter's refusals are these rows' case labels, generated; its rules are the Yes rows').
#define GR_OP_IF_EMIT_NO_No(...) __VA_ARGS__
#define GR_OP_IF_EMIT_NO_Yes(...)

// The host-side text of a kernel name prefix: kernels are grk_<stem>_<part> (GR_KERNEL_STR turns a
// pasted name into its string, so the device code names a kernel once, as an identifier).
#define GR_KERNEL_STR_(x) #x
#define GR_KERNEL_STR(x) GR_KERNEL_STR_(x)

// ---- calling a scalar function with the arguments its row names -----------------------------------
// GR_OP_ARGS_<list>(g, a, b, y, s) → the parenthesized argument list, e.g. GR_OP_ARGS_g_y → (g, y).
#define GR_OP_ARGS_a(g, a, b, y, s) (a)
#define GR_OP_ARGS_a_s(g, a, b, y, s) (a, s)
#define GR_OP_ARGS_a_b(g, a, b, y, s) (a, b)
#define GR_OP_ARGS_g(g, a, b, y, s) (g)
#define GR_OP_ARGS_g_a(g, a, b, y, s) (g, a)
#define GR_OP_ARGS_g_b(g, a, b, y, s) (g, b)
#define GR_OP_ARGS_g_y(g, a, b, y, s) (g, y)
#define GR_OP_ARGS_g_s(g, a, b, y, s) (g, s)
#define GR_OP_ARGS_g_y_b(g, a, b, y, s) (g, y, b)
#define GR_OP_ARGS_g_a_y(g, a, b, y, s) (g, a, y)
#define GR_OP_ARGS_g_a_s(g, a, b, y, s) (g, a, s)
#define GR_OP_ARGS_g_y_s(g, a, b, y, s) (g, y, s)
#define GR_OP_ARGS_g_a_b(g, a, b, y, s) (g, a, b)
#define GR_OP_ARGS_g_a_y_b(g, a, b, y, s) (g, a, y, b)

// ---- uniform elementwise functions, generated from the rows --------------------------------------
// gr_ew_<stem>::fwd(a, b, s), ::bwd_a(g, a, b, y, s), ::bwd_b(...): every elementwise op behind one
// signature, so loops, kernels and fused code are written once for all of them. Each is exactly the
// row's gr_<stem>_* call (unused operands are ignored), so the bits are the scalar definitions'.
#define GR_EW_UNARY_STRUCT(E, name, arity, cls, attrs, stem, FWD_ARGS, BWDA_ARGS, BWDB_ARGS, ...)                  \
  struct gr_ew_##stem {                                                                            \
    template <class T> GR_HD static inline T fwd(T a, T b, T s) {                                  \
      (void)b; (void)s;                                                                            \
      return gr_##stem##_fwd GR_OP_ARGS_##FWD_ARGS(T(0), a, b, T(0), s);                                \
    }                                                                                              \
    template <class T> GR_HD static inline T bwd_a(T g, T a, T b, T y, T s) {                      \
      (void)a; (void)b; (void)y; (void)s;                                                          \
      return gr_##stem##_bwd GR_OP_ARGS_##BWDA_ARGS(g, a, b, y, s);                                     \
    }                                                                                              \
  };
#define GR_EW_BINARY_STRUCT(E, name, arity, cls, attrs, stem, FWD_ARGS, BWDA_ARGS, BWDB_ARGS, ...)                 \
  struct gr_ew_##stem {                                                                            \
    template <class T> GR_HD static inline T fwd(T a, T b, T s) {                                  \
      (void)s;                                                                                     \
      return gr_##stem##_fwd GR_OP_ARGS_##FWD_ARGS(T(0), a, b, T(0), s);                                \
    }                                                                                              \
    template <class T> GR_HD static inline T bwd_a(T g, T a, T b, T y, T s) {                      \
      (void)a; (void)b; (void)y; (void)s;                                                          \
      return gr_##stem##_bwd_a GR_OP_ARGS_##BWDA_ARGS(g, a, b, y, s);                                   \
    }                                                                                              \
    template <class T> GR_HD static inline T bwd_b(T g, T a, T b, T y, T s) {                      \
      (void)a; (void)b; (void)y; (void)s;                                                          \
      return gr_##stem##_bwd_b GR_OP_ARGS_##BWDB_ARGS(g, a, b, y, s);                                   \
    }                                                                                              \
  };
#define GR_EW_STRUCT(E, name, arity, cls, ...)                       \
  GR_OP_IF_UNARY_##cls(GR_EW_UNARY_STRUCT(E, name, arity, cls, __VA_ARGS__)) \
  GR_OP_IF_BINARY_##cls(GR_EW_BINARY_STRUCT(E, name, arity, cls, __VA_ARGS__))
