// bench_stream_pass — what one elementwise pass over a conv-sized tensor costs on this machine, outside
// the tape: relu (the tape's rule, NaN kept) from one 512 KB buffer of doubles into another, the pair of
// buffers reused (in L2) or rotated over 4 and 16 pairs (4 and 16 MB: L3), best of 200 rounds. The digits
// CNN's conv1 output [64, 16, 8, 8] is one such buffer; docs/performance.md "stop 59" compares the tape's
// passes with this floor.
//   bench_stream_pass
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double pass_us(int pairs) {
  constexpr long kN = 65536;  // 512 KB of doubles
  std::vector<std::vector<double>> src(pairs, std::vector<double>(kN)), dst(pairs, std::vector<double>(kN, 0.0));
  for (auto& s : src)
    for (long i = 0; i < kN; ++i) s[i] = static_cast<double>(i % 7) - 3.0;
  double best = 1e30;
  for (int round = 0; round < 200; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < pairs; ++b) {
      const double* __restrict s = src[b].data();
      double* __restrict d = dst[b].data();
      for (long i = 0; i < kN; ++i) {
        const double x = s[i];
        d[i] = x > 0.0 ? x : (x != x ? x : 0.0);
      }
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / pairs;
    if (us < best) best = us;
  }
  return best;
}

}  // namespace

int main() {
  for (const int pairs : {1, 4, 16}) {
    const double us = pass_us(pairs);
    std::printf("relu pass, 512 KB -> 512 KB, %2d buffer pair(s): %6.2f us (%.3f ns an element)\n", pairs, us,
                us * 1000.0 / 65536.0);
  }
}
