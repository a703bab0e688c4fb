// gr_gather_kernels.cuh — embedding's per-node kernels of the replay engine (lib/replay), appended
// after gr_node_kernels.cuh (it relies on gr_prelude.cuh); f64, and f32 as the same text over float.
// The rules are kernels/gr_ops_gather.h, the CPU tape's (lib/grad/tape_gather.cpp), so the bits match.
// Shapes: ids [P] (integer ids as reals), table [V,D], y [P,D], the table's gradient slot [V,D].

// ---- embedding (gr_ops_gather.h): ids [P], table [V,D] → y [P,D]; the forward one thread per output
// element, the backward one thread per table element walking the positions ascending (no atomics) ---------
extern "C" __global__ void grk_embedding_fwd(const gr_real* ids, const gr_real* table, gr_real* y, long long V, long long D,
                                             long long n) {
  GRK_LOOP(e, n) y[e] = gr_embedding_fwd(ids, table, V, D, e);
}
GR_EXPORT_KERNEL(grk_embedding_fwd)

extern "C" __global__ void grk_embedding_bwd_b(const gr_real* g, const gr_real* ids, gr_real* slot, long long P, long long V,
                                               long long D) {
  GRK_LOOP(j, V * D) slot[j] = gr_embedding_bwd_b(g, ids, slot[j], P, V, D, j);
}
GR_EXPORT_KERNEL(grk_embedding_bwd_b)
