// gr_ops_gather.h — THE embedding rules (gr_op_table.h row `embedding`, Shape Gather): a row gather
// forward and its scatter-add backward, written once for the CPU tape (lib/grad/tape_gather.cpp),
// the per-node kernels (kernels/device/gr_gather_kernels.cuh, host replay and CUDA) and the tests.
//
// Shapes:  ids   [P]     P = N·T positions (any leading shape, flattened), integer ids held as reals
//          table [V, D]  one row per id
//          y     [P, D]  y[p, d] = table[ids[p], d]
//          dT    [V, D]  dT[v, d] = slot[v, d] + Σ g[p, d] over the positions p with ids[p] = v,
//                        p ASCENDING, one rounding per addition (docs/numerics.md "embedding")
// The ids get no gradient (they are a const or data, never a computed value).
//
// An id that is not an integer in [0, V) (a fraction, negative, ≥ V, NaN, ±inf) selects no row:
// its output row is NaN and it contributes nothing to dT. Data ids are refused before training
// (lib/spec check_class_ids), so only a const's ids can reach this (docs/spec.md).
//
// The backward per table element walks every position: one device thread per element of dT, no
// atomics (docs/device.md), and the same chain as the CPU tape's walk over positions ascending.
#pragma once
#include "gr_device.h"
#include "gr_ops_scalar.h"

// The table row that id selects, or -1 when it is not an integer in [0, V).
template <class T>
GR_HD static inline long long gr_embedding_row(T id, long long V) {
  if (!(id >= T(0)) || !(id < (T)V)) return -1;
  const long long k = (long long)id;
  return (T)k == id ? k : -1;
}

// Element e of y ([P, D] row-major).
template <class T>
GR_HD static inline T gr_embedding_fwd(const T* ids, const T* table, long long V, long long D, long long e) {
  const long long r = gr_embedding_row(ids[e / D], V);
  return r < 0 ? gr_rdiv(T(0), T(0)) : table[r * D + e % D];
}

// Element j = v·D + d of the table's gradient after this node: slot + g[p, d] for each position p
// with ids[p] = v, p ascending (slot unchanged when v is selected nowhere).
template <class T>
GR_HD static inline T gr_embedding_bwd_b(const T* g, const T* ids, T slot, long long P, long long V, long long D,
                                         long long j) {
  const long long v = j / D, d = j % D;
  T acc = slot;
  for (long long p = 0; p < P; ++p)
    if (gr_embedding_row(ids[p], V) == v) acc = gr_accumulate(acc, g[p * D + d]);
  return acc;
}
