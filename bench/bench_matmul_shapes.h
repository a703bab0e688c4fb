// bench_matmul_shapes.h — what bench_matmul times: the square sizes and every product shape the
// examples run (f64, and the f32 tape's products), as data apart from the timing code. Included by
// bench_matmul.cpp alone (the const tables have internal linkage).
#pragma once
#include <cstddef>
#include <cstdint>

// C = A·B with A M×K (stored K×M when a_trans) and B K×N (stored N×K when b_trans); Overwrite is
// BLAS's beta = 0, Accumulate (what backward does) beta = 1.
struct Shape {
  int64_t m, k, n;
  bool a_trans, b_trans, accumulate;
  const char* what;
};

const int64_t kSquare[] = {64, 128, 256, 512, 1024};

// The CNNs' conv layers as the im2col products they would be (issue 42; the CPU tape runs them as direct
// loops, lib/grad/tape_conv*.cpp, except dx's D below where its product path applies): F filters, K =
// C·kh·kw taps, NP = N·OH·OW output cells, Col [NP, K]. Yᵀ = Col·Wᵀ, dWᵀ = Colᵀ·G (k = NP, the (n, oh,
// ow) order), D = Wᵀ·Gᵀ (k = F): the yardstick the direct loops are held against. LeNet-5's conv2 at
// batch 64: 6→16, 5×5, 10×10; conv1: 1→6, 5×5, padding 2, 28×28; the digits CNN's (specs/digits-cnn.json)
// 16→32 on 4×4 and 1→16 on 8×8, 3×3 "same". The same rows in the f64 and the f32 table.
#define GR_BENCH_CONV_SHAPES \
    {6400, 150, 16, false, true, false, "lenet c2 fwd"}, \
    {150, 6400, 16, true, false, false, "lenet c2 dW"}, \
    {150, 16, 6400, true, true, false, "lenet c2 dcol"}, \
    {50176, 25, 6, false, true, false, "lenet c1 fwd"}, \
    {25, 50176, 6, true, false, false, "lenet c1 dW"}, \
    {1024, 144, 32, false, true, false, "digits c2 fwd"}, \
    {144, 1024, 32, true, false, false, "digits c2 dW"}, \
    {144, 32, 1024, true, true, false, "digits c2 dcol"}, \
    {4096, 9, 16, false, true, false, "digits c1 fwd"}, \
    {9, 4096, 16, true, false, false, "digits c1 dW"},

// Every product the examples and benchmarks run (forward, and backward's dW = Xᵀ·g with a
// transposed A and dX = g·Wᵀ with a transposed B, both accumulating).
const Shape kShapes[] = {
    {4, 2, 16, false, false, false, "tiny"},
    {1, 64, 64, false, false, false, "one row"},
    {32, 32, 32, false, false, false, "small square"},
    {200, 6, 64, false, false, false, "autoenc fwd 6-64"},
    {200, 64, 32, false, false, false, "autoenc fwd 64-32"},
    {200, 32, 64, false, false, false, "autoenc fwd 32-64"},
    {200, 64, 6, false, false, false, "autoenc fwd 64-6"},
    {6, 200, 64, true, false, true, "autoenc dW 6-64"},
    {64, 200, 32, true, false, true, "autoenc dW 64-32"},
    {32, 200, 64, true, false, true, "autoenc dW 32-64"},
    {64, 200, 6, true, false, true, "autoenc dW 64-6"},
    {200, 32, 64, false, true, true, "autoenc dX 64-32"},
    {200, 64, 32, false, true, true, "autoenc dX 32-64"},
    {200, 6, 64, false, true, true, "autoenc dX 64-6"},
    {64, 784, 256, false, false, false, "mlp784 fwd 1"},
    {64, 256, 128, false, false, false, "mlp784 fwd 2"},
    {64, 128, 10, false, false, false, "mlp784 fwd 3"},
    {784, 64, 256, true, false, true, "mlp784 dW1"},
    {256, 64, 128, true, false, true, "mlp784 dW2"},
    {128, 64, 10, true, false, true, "mlp784 dW3"},
    {64, 128, 256, false, true, true, "mlp784 dX2"},
    {64, 10, 128, false, true, true, "mlp784 dX3"},
    {64, 512, 10, false, false, false, "digits-cnn dense fwd"},
    {512, 64, 10, true, false, true, "digits-cnn dense dW"},
    {64, 10, 512, false, true, true, "digits-cnn dense dX"},
    {256, 1024, 1024, false, false, false, "mlp1024 fwd 1"},
    {256, 1024, 10, false, false, false, "mlp1024 fwd 2"},
    {1024, 256, 1024, true, false, true, "mlp1024 dW1"},
    {1024, 256, 10, true, false, true, "mlp1024 dW2"},
    {256, 10, 1024, false, true, true, "mlp1024 dX2"},
    GR_BENCH_CONV_SHAPES  // the conv layers (above)
    // The words transformer (specs/words-transformer.json, batch 32 × context 16 = 512 rows, width
    // 64, MLP 128, vocabulary 27): linear layers on [N,T,D] as [512, D] products, dW one chain over
    // the 512 rows (docs/numerics.md), dX against Wᵀ.
    {512, 64, 64, false, false, false, "words qkvo fwd"},
    {512, 64, 128, false, false, false, "words up fwd"},
    {512, 128, 64, false, false, false, "words down fwd"},
    {512, 64, 27, false, false, false, "words head fwd"},
    {64, 512, 64, true, false, false, "words qkvo dW"},
    {64, 512, 128, true, false, false, "words up dW"},
    {128, 512, 64, true, false, false, "words down dW"},
    {64, 512, 27, true, false, false, "words head dW"},
    {512, 64, 64, false, true, false, "words qkvo dX"},
    {512, 128, 64, false, true, false, "words up dX"},
    {512, 64, 128, false, true, false, "words down dX"},
    {512, 27, 64, false, true, false, "words head dX"},
    {16, 64, 16, false, true, false, "words scores fwd"},
};
constexpr size_t kNumShapes = sizeof kShapes / sizeof kShapes[0];

// The f32 products of the models: timed as the f32 CPU tape calls them (matmul_exact_f32: A, B and
// C stored as doubles holding floats) and on floats (MatmulArgsF32), both against sgemm on floats.
const Shape kShapes32[] = {
    {256, 1024, 1024, false, false, false, "mlp1024 fwd 1"},
    {256, 1024, 10, false, false, false, "mlp1024 fwd 2"},
    {1024, 256, 1024, true, false, true, "mlp1024 dW1"},
    {1024, 256, 10, true, false, true, "mlp1024 dW2"},
    {256, 10, 1024, false, true, true, "mlp1024 dX2"},
    {64, 784, 256, false, false, false, "mlp784 fwd 1"},
    {784, 64, 256, true, false, true, "mlp784 dW1"},
    GR_BENCH_CONV_SHAPES
    // The words transformer's products on the f32 tape (the f64 table's rows above).
    {512, 64, 64, false, false, false, "words qkvo fwd"},
    {512, 64, 128, false, false, false, "words up fwd"},
    {512, 128, 64, false, false, false, "words down fwd"},
    {512, 64, 27, false, false, false, "words head fwd"},
    {64, 512, 64, true, false, true, "words qkvo dW"},
    {64, 512, 128, true, false, true, "words up dW"},
    {128, 512, 64, true, false, true, "words down dW"},
    {512, 64, 64, false, true, true, "words qkvo dX"},
    {512, 128, 64, false, true, true, "words up dX"},
    {512, 64, 128, false, true, true, "words down dX"},
};
constexpr size_t kNumShapes32 = sizeof kShapes32 / sizeof kShapes32[0];

