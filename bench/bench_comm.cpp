// bench_comm — the α–β cost of the sharded step's messages on this machine (docs/distributed.md).
//
//   mpirun -np R bench_comm [P]
// Rank 0 prints, for the process group's transport (shared memory on one machine):
//   * ping-pong between ranks 0 and 1 for n = 1 … 2^20 doubles: one-way time t(n), and the fit
//     t(n) = α + β·bytes (α: one double's time; β: the slope over the large messages);
//   * the step's two collectives as ShardedStep runs them for P parameters (default 235146, the
//     784-256-128-10 MLP) with S = R shards: the all-to-all of the gradient slices and the
//     all-gather of the updated parameters, and what the fitted model predicts for them.
// Times are medians of repeated runs, in microseconds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dist/comm.h"

using namespace gr;

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (!dist::built_with_mpi() || dist::launched_size() == 0) {
    std::fprintf(stderr, "bench_comm: run it under mpirun (-np 2 or more) in a build with MPI\n");
    return 2;
  }
  const std::unique_ptr<dist::Comm> comm = dist::world();
  const int r = comm->rank(), R = comm->size();
  if (R < 2) {
    if (r == 0) std::fprintf(stderr, "bench_comm: needs at least 2 processes\n");
    return 2;
  }
  const int64_t P = argc > 1 ? std::atoll(argv[1]) : 235146;
  std::vector<double> buf(static_cast<size_t>(std::max<int64_t>(P * 2, 1 << 20)), 1.0);

  // Ping-pong 0 <-> 1: one-way time.
  std::vector<std::pair<double, double>> points;  // (bytes, us)
  if (r == 0) std::printf("ping-pong rank 0 <-> 1, one way (median of repeats):\n");
  for (int64_t n = 1; n <= (1 << 20); n *= 4) {
    const int reps = n < 4096 ? 2000 : n < 65536 ? 200 : 40;
    std::vector<double> times;
    for (int k = 0; k < reps; ++k) {
      const double t0 = now_us();
      if (r == 0) {
        comm->send(1, buf.data(), n);
        comm->recv(1, buf.data(), n);
      } else if (r == 1) {
        comm->recv(0, buf.data(), n);
        comm->send(0, buf.data(), n);
      }
      times.push_back((now_us() - t0) / 2);
    }
    const double t = median(times);
    points.emplace_back(8.0 * static_cast<double>(n), t);
    if (r == 0) std::printf("  %9lld doubles  %10.2f us  %8.2f GB/s\n", static_cast<long long>(n), t, 8.0 * n / t / 1e3);
  }
  // t = α + β·bytes: α is the one-double time (latency-bound), β the least-squares slope through the
  // messages of 4096 doubles and more (bandwidth-bound) with α fixed. A free two-parameter fit lets
  // the megabyte messages pull α below zero.
  const double alpha = points.front().second;
  double sxy = 0, sxx = 0;
  for (auto [x, y] : points)
    if (x >= 8.0 * 4096) sxy += x * (y - alpha), sxx += x * x;
  const double beta = sxy / sxx;
  if (r == 0) std::printf("fit: alpha %.2f us, beta %.4f us/KB (%.2f GB/s)\n", alpha, beta * 1024, 1e-3 / beta);

  // The step's collectives for P parameters, S = R shards (one shard per rank).
  std::vector<int64_t> lo(static_cast<size_t>(R + 1));
  for (int q = 0; q <= R; ++q) lo[static_cast<size_t>(q)] = q * P / R;
  const int64_t mine = lo[static_cast<size_t>(r) + 1] - lo[static_cast<size_t>(r)];
  std::vector<int64_t> sc, sd, rc, rd, pc, pd;
  for (int q = 0; q < R; ++q) {
    const int64_t nq = lo[static_cast<size_t>(q) + 1] - lo[static_cast<size_t>(q)];
    sc.push_back(nq), sd.push_back(lo[static_cast<size_t>(q)]);
    rc.push_back(mine), rd.push_back(q * mine);
    pc.push_back(nq), pd.push_back(lo[static_cast<size_t>(q)]);
  }
  std::vector<double> send(static_cast<size_t>(P), 1.0), recv(static_cast<size_t>(std::max<int64_t>(R * mine, 1))), params(static_cast<size_t>(P));
  std::vector<double> a2a, ag;
  for (int k = 0; k < 50; ++k) {
    double t0 = now_us();
    comm->alltoallv(send.data(), sc, sd, recv.data(), rc, rd);
    a2a.push_back(now_us() - t0);
    t0 = now_us();
    comm->allgatherv(send.data(), mine, params.data(), pc, pd);
    ag.push_back(now_us() - t0);
  }
  const double bytes_out = 8.0 * static_cast<double>(P - mine);  // each collective moves this much per rank
  if (r == 0)
    std::printf("P = %lld parameters, R = %d: all-to-all %.1f us (model %.1f), all-gather %.1f us (model %.1f)\n",
                static_cast<long long>(P), R, median(a2a), (R - 1) * alpha + beta * bytes_out, median(ag),
                (R - 1) * alpha + beta * bytes_out);
  return 0;
}
