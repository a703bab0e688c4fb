// parallel.h — a small persistent thread pool for splitting work over OUTPUT rows.
//
// Determinism rule: work is only ever split so that each output element is computed entirely by
// one thread, in the same order as the serial loop — never over a reduction index. Then 1 and N
// threads give the same bytes. The library defaults to 1 thread; the CLI sets --threads.
#pragma once
#include <cstdint>

namespace gr {

void set_num_threads(int n);  // n >= 1; threads are started lazily on first use
int num_threads();
int hardware_threads();       // std::thread::hardware_concurrency(), at least 1

// Runs fn(ctx, task) for task = 0 .. tasks-1 over the pool (the caller takes part), and returns
// when all are done. Thread i (the caller is 0) runs tasks i, i + T, ... unless it is late (then
// another takes them), so code that splits a buffer the same way region after region keeps each
// block on one core (tensor/matmul.h, output_grid). No allocation. Must not be called from inside
// a task.
void parallel_for(int64_t tasks, void (*fn)(void* ctx, int64_t task), void* ctx);

template <class F>
void parallel_for(int64_t tasks, F&& f) {
  parallel_for(tasks, [](void* c, int64_t t) { (*static_cast<F*>(c))(t); }, static_cast<void*>(&f));
}

}  // namespace gr
