// gr_opt_kernels.cuh — fills and the device optimizer of the replay engine (lib/replay).
//
// The per-element arithmetic is kernels/gr_optim.h, the same text lib/grad/optimizer.cpp runs. Per-step scalars
// live in a small control buffer the host refreshes before every step, so a captured episode never
// freezes them:
//   ctl[0] lr (SGD; AdamW's decay)   ctl[1] lr_t (Adam, host pow)   ctl[2] clip scale cs   ctl[3] max norm   ctl[4] norm
//   ctl[8 .. 8 + GR_NORM_LANES) the norm's lanes, scratch inside grk_clip_scale
// The control buffer is always double (the host writes it); values, gradients and moments are gr_real.
// Appended after gr_node_kernels.cuh (it relies on gr_prelude.cuh).

// p[e] = v for e < n (gradient zero-fill, the backward seed).
extern "C" __global__ void grk_fill(gr_real* p, double v, long long n) {
  const gr_real vr = GRK_REAL(v);
  GRK_LOOP(e, n) p[e] = vr;
}
GR_EXPORT_KERNEL(grk_fill)

// Global-norm clip: sq = Σ g·g over the table's params in 16 lanes (gr_optim.h: registration order,
// each parameter from lane 0; then gr_norm_fold); norm = sqrt(sq); cs = norm > maxn ? maxn / norm : 1.
// tab = [offset, len] per param, offsets in elements of the gradient slab g. Launched as ONE block:
// its threads stride the lanes (a block of 16: one lane each, gr_norm_lane), each lane a serial
// chain in the CPU's order, parked in ctl[8 + j] (exact: a float lane is exact as a double); after
// the barrier thread 0 folds them. Any block size gives the same bits; other blocks do nothing.
extern "C" __global__ void grk_clip_scale(const gr_real* g, const long long* tab, long long count, double* ctl) {
  if (blockIdx.x != 0) return;
  double* parked = ctl + 8;
  for (int j = (int)threadIdx.x; j < GR_NORM_LANES; j += (int)blockDim.x) {
    gr_real lane = 0;
    for (long long p = 0; p < count; ++p) lane = gr_norm_lane(lane, g + tab[2 * p], tab[2 * p + 1], j);
    parked[j] = (double)lane;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  gr_real lanes[GR_NORM_LANES];
  for (int j = 0; j < GR_NORM_LANES; ++j) lanes[j] = GRK_REAL(parked[j]);
  const gr_real sq = gr_norm_fold(lanes);
  const gr_real norm = gr_sqrt(sq);
  const gr_real maxn = GRK_REAL(ctl[3]);
  ctl[2] = norm > maxn ? GRK_DIV(maxn, norm) : (gr_real)1;
  ctl[4] = norm;
}
GR_EXPORT_KERNEL(grk_clip_scale)

// SGD (gr_optim.h gr_opt_sgd): w = w − lr·ge, ge = g·cs + α·w.
extern "C" __global__ void grk_sgd(gr_real* w, const gr_real* g, const double* ctl, double alpha, long long n) {
  const gr_real cs = GRK_REAL(ctl[2]), lr = GRK_REAL(ctl[0]), a = GRK_REAL(alpha);
  GRK_LOOP(i, n) w[i] = gr_opt_sgd(w[i], gr_opt_ge(g[i], cs, a, w[i]), lr);
}
GR_EXPORT_KERNEL(grk_sgd)

// SGD with momentum μ (and Nesterov): gr_optim.h gr_opt_sgd_momentum, buffer b per element.
extern "C" __global__ void grk_sgd_momentum(gr_real* w, const gr_real* g, gr_real* b, const double* ctl, double alpha,
                                            double momentum, long long nesterov, long long n) {
  const gr_real cs = GRK_REAL(ctl[2]), lr = GRK_REAL(ctl[0]), a = GRK_REAL(alpha), mu = GRK_REAL(momentum);
  GRK_LOOP(i, n) w[i] = gr_opt_sgd_momentum(w[i], gr_opt_ge(g[i], cs, a, w[i]), &b[i], lr, mu, nesterov != 0);
}
GR_EXPORT_KERNEL(grk_sgd_momentum)

// Adam and AdamW (gr_optim.h): decoupled decay w·(1 − lr·wd) (wd = 0: Adam), then the Adam step with
// lr_t = ctl[1]. 1−β1 and 1−β2 come computed by the host at run time, as optimizer.cpp computes them.
extern "C" __global__ void grk_adam(gr_real* w, const gr_real* g, gr_real* m, gr_real* v, const double* ctl,
                                    double alpha, double beta1, double beta2, double one_minus_beta1,
                                    double one_minus_beta2, double epsilon, double weight_decay, long long n) {
  const gr_real cs = GRK_REAL(ctl[2]), lr = GRK_REAL(ctl[0]), lr_t = GRK_REAL(ctl[1]), a = GRK_REAL(alpha);
  const gr_real b1 = GRK_REAL(beta1), b2 = GRK_REAL(beta2), omb1 = GRK_REAL(one_minus_beta1),
                omb2 = GRK_REAL(one_minus_beta2), eps = GRK_REAL(epsilon), wd = GRK_REAL(weight_decay);
  GRK_LOOP(i, n) {
    const gr_real ge = gr_opt_ge(g[i], cs, a, w[i]);
    w[i] = gr_opt_adam(gr_opt_decay(w[i], lr, wd), ge, &m[i], &v[i], lr_t, b1, b2, omb1, omb2, eps);
  }
}
GR_EXPORT_KERNEL(grk_adam)
