// gr_math.h — deterministic exp and log for double, the same bits on every path.
//
// Why not libm: glibc's exp/log and CUDA's exp/log are both good, but they are different
// algorithms and disagree in the last bit on a fraction of inputs; the host compiler may also
// inline its own version. gradrun promises the same bits on the CPU tape and on every device
// path (docs/design.md §2), so exp and log are written here once, from nothing but correctly rounded
// IEEE binary64 operations (__dadd_rn, __dsub_rn, __dmul_rn, __ddiv_rn — see gr_device.h) and
// integer bit manipulation. Each of those operations has exactly one correct answer, so the
// composition has exactly one answer too, whatever the hardware. No FMA (it would change the
// rounding), no libm, no standard headers (this must compile under NVRTC), no loops, no
// __constant__ tables.
//
// Algorithms: after fdlibm's e_exp.c and e_log.c (Sun Microsystems, 1993, "Developed at SunSoft,
// a Sun Microsystems, Inc. business. Permission to use, copy, modify, and distribute this software
// is freely granted, provided that this notice is preserved."). The argument reductions, the
// Remez coefficients and the shape of the reconstruction are theirs. Rewritten here: one
// branch-free formula per function instead of fdlibm's fast-path variants, exact final sums
// (Fast2Sum, and for log an exact f^2/2) that buy ~0.2 ulp of extra margin, the 2^k scaling,
// and the special values. Both are faithful — error below 1 ulp over the whole range,
// subnormals included; tests/test_detmath.cpp measures ~0.78 ulp worst for exp (subnormal
// results; ~0.70 elsewhere) and ~0.66 for log, see docs/detmath.md.
//
// Special values: exp(±0) = 1, exp(+inf) = +inf, exp(-inf) = +0, exp(x > 709.78...) = +inf,
// exp(x < -745.13...) = +0; log(±0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, log(1) = +0.
// A NaN argument comes back as the same NaN with its quiet bit set (done with integer ops, so the
// payload does not depend on how a given chip propagates NaNs); a NaN made here (log of a
// negative number) is always the canonical quiet NaN 0x7ff8000000000000.
#pragma once

#include "gr_device.h"

// ---- private helpers -------------------------------------------------------------------------

// The double with bit pattern `b`; all bit fiddling is done in unsigned arithmetic (no UB).
GR_HD static inline double gr_detail_from_u64(unsigned long long b) { return gr_from_bits(static_cast<long long>(b)); }
GR_HD static inline unsigned long long gr_detail_u64(double x) { return static_cast<unsigned long long>(gr_bits(x)); }

// 2^e for a normal exponent, -1022 <= e <= 1023: just the biased exponent in place.
GR_HD static inline double gr_detail_pow2(long long e) {
  return gr_detail_from_u64(static_cast<unsigned long long>(e + 1023) << 52);
}

// A NaN argument, quieted, payload and sign kept.
GR_HD static inline double gr_detail_quiet(double x) {
  return gr_detail_from_u64(gr_detail_u64(x) | 0x0008000000000000ULL);
}

// The shift trick: with shift = 1.5 * 2^52 and |v| < 2^51, (v + shift) rounds v to the nearest
// integer n (ties to even) and leaves n in the low mantissa bits, so bits(v + shift) - bits(shift)
// == n and (v + shift) - shift == n exactly. That is round-to-integer and int -> double with IEEE
// adds only — no conversion instructions whose rounding mode we would have to trust.
//
// ln2 is split as in fdlibm: ln2_hi has only 32 significant bits (21 trailing zero bits), so
// k * ln2_hi is exact for |k| < 2^21, far more than the |k| <= 1075 needed here;
// ln2_lo = ln2 - ln2_hi, rounded (~1.9e-10).
// Both functions declare these as plain local constants: no namespace-scope objects, nothing
// for NVRTC or device code to place in memory.

// ---- exp -------------------------------------------------------------------------------------
//
// 1. Reduce: x = k*ln2 + r, k = round(x/ln2), |r| <= ~0.5*ln2 = 0.3466. r is carried as hi - lo:
//    hi = x - k*ln2_hi is exact (k*ln2_hi is exact, and x and k*ln2_hi are both multiples of
//    2^-54 with a difference below 0.5, so the difference fits in 53 bits), lo = k*ln2_lo.
// 2. Approximate: with R(r) = r*(exp(r)+1)/(exp(r)-1), a Remez polynomial in r^2 gives
//    c = r - r^2*(P1 + ... + P5*r^8) = r - (R(r) - 2) (|error| < 2^-59 on [0, 0.34658]), and
//    exp(r) = 1 + 2r/(2 - c) = 1 + r + q with q = r*c/(2 - c).
//    fdlibm sums this as 1 - ((lo - q) - hi), whose two roundings cost up to ~0.9 ulp when
//    exp(r) < 1 (we measured 0.89). Here 1 + hi is split exactly into a + e (Fast2Sum: |hi| < 1), and
//    y = a + (e + (q - lo)) rounds once up to a tiny tail error: <= ~0.70 ulp in all.
//    k = 0 needs no separate case (lo = 0, hi = r), and tiny |x| comes out as 1 + x.
// 3. Scale by 2^k as two exact multiplications by 2^(k/2) and 2^(k - k/2): both factors are
//    normal for every k in [-1075, 1024], y*2^(k/2) is normal, and the second product rounds
//    at most once — into the subnormal range when the result is that small, to +inf never
//    (x <= o_threshold keeps the result finite). For subnormal results that is a second
//    rounding of y, at most 0.5 + 0.70/2 < 0.85 ulp (measured 0.78); musl's trick of rounding
//    y to the subnormal precision first would win ~0.3 ulp there for another branch.
//
// Outside [u_threshold, o_threshold] (and for NaN) one rarely taken branch returns the answer
// (GCC still if-converts and vectorizes a loop over gr_exp).
GR_HD static inline double gr_exp(double x) {
  // o_threshold: the largest double whose exp is finite (ln(DBL_MAX) rounded down).
  // u_threshold: the smallest double whose exp rounds to a nonzero value (just above
  // -1075*ln2, where exp(x) = 2^-1075 = half the smallest subnormal).
  const double o_threshold = 0x1.62e42fefa39efp+9;   // 709.782712893384
  const double u_threshold = -0x1.74910d52d3051p+9;  // -745.1332191019411
  const double inv_ln2 = 0x1.71547652b82fep+0;       // 1/ln2
  const double shift = 0x1.8p52;
  const long long shift_bits = 0x4338000000000000LL;  // bits of shift
  const double ln2_hi = 0x1.62e42fee00000p-1;         // 0x3fe62e42fee00000
  const double ln2_lo = 0x1.a39ef35793c76p-33;        // 0x3dea39ef35793c76
  const double P1 = 0x1.555555555553ep-3;
  const double P2 = -0x1.6c16c16bebd93p-9;
  const double P3 = 0x1.1566aaf25de2cp-14;
  const double P4 = -0x1.bbd41c5d26bf1p-20;
  const double P5 = 0x1.6376972bea4d0p-25;

  if (!(x >= u_threshold && x <= o_threshold)) {
    if (x != x) return gr_detail_quiet(x);
    if (x > 0.0) return gr_detail_from_u64(0x7ff0000000000000ULL);  // overflow, +inf -> +inf
    return 0.0;                                                     // underflow, -inf -> +0
  }

  // k = round(x/ln2), |k| <= 1075, and kd = (double)k, both through the shift trick.
  const double t = __dadd_rn(__dmul_rn(x, inv_ln2), shift);
  const long long k = gr_bits(t) - shift_bits;
  const double kd = __dsub_rn(t, shift);

  const double hi = __dsub_rn(x, __dmul_rn(kd, ln2_hi));  // exact
  const double lo = __dmul_rn(kd, ln2_lo);
  const double r = __dsub_rn(hi, lo);

  const double r2 = __dmul_rn(r, r);
  const double p4 = __dadd_rn(P4, __dmul_rn(r2, P5));
  const double p3 = __dadd_rn(P3, __dmul_rn(r2, p4));
  const double p2 = __dadd_rn(P2, __dmul_rn(r2, p3));
  const double p1 = __dadd_rn(P1, __dmul_rn(r2, p2));
  const double c = __dsub_rn(r, __dmul_rn(r2, p1));
  const double q = __ddiv_rn(__dmul_rn(r, c), __dsub_rn(2.0, c));
  // y = 1 + hi - lo + q. a = 1 + hi rounded; e = (1 + hi) - a exactly (Fast2Sum, 1 >= |hi|).
  const double a = __dadd_rn(1.0, hi);
  const double e = __dsub_rn(hi, __dsub_rn(a, 1.0));
  const double y = __dadd_rn(a, __dadd_rn(e, __dsub_rn(q, lo)));  // exp(r), in (0.7, 1.42)

  // C++ integer division truncates toward zero: k1 in [-537, 512], k2 in [-538, 512].
  const long long k1 = k / 2;
  const long long k2 = k - k1;
  return __dmul_rn(__dmul_rn(y, gr_detail_pow2(k1)), gr_detail_pow2(k2));
}

// ---- log -------------------------------------------------------------------------------------
//
// 1. Reduce: x = 2^k * (1 + f) with 1 + f in [sqrt(2)/2, sqrt(2)), so |f| < 0.4143. Subnormal
//    x is first scaled by 2^54 (exact). f = (1 + f) - 1 is exact (Sterbenz).
// 2. Approximate: s = f/(2 + f), so log(1 + f) = log(1 + s) - log(1 - s) = 2s + 2s^3/3 + ...
//    = 2s + s*R(s^2), with R a Remez polynomial Lg1*z + ... + Lg7*z^7 in z = s^2
//    (|error| < 2^-58.45 on |s| <= 0.1716), evaluated as an even and an odd half for a shorter
//    dependency chain. With hfsq = f^2/2 and 2s = f - s*f:
//    log(1 + f) = f - hfsq + s*(hfsq + R).
// 3. Reconstruct: log(x) = k*ln2_hi + f - hfsq + (s*(hfsq + R) + k*ln2_lo). fdlibm evaluates
//    this (its most accurate variant) as k*ln2_hi - ((hfsq - (...)) - f), where the roundings
//    of hfsq and of the inner difference cost up to ~0.3 ulp on top of the final 0.5 (we
//    measured 0.86 ulp). Here the three big terms are summed exactly and rounded once — see
//    below — which leaves <= ~0.66 ulp. fdlibm's cheaper variants for small |f| and for k == 0
//    are dropped: one formula for every input means no branches, and for x = 1 every term is
//    +0, so log(1) = +0 exactly.
GR_HD static inline double gr_log(double x) {
  const double Lg1 = 0x1.5555555555593p-1;
  const double Lg2 = 0x1.999999997fa04p-2;
  const double Lg3 = 0x1.2492494229359p-2;
  const double Lg4 = 0x1.c71c51d8e78afp-3;
  const double Lg5 = 0x1.7466496cb03dep-3;
  const double Lg6 = 0x1.39a09d078c69fp-3;
  const double Lg7 = 0x1.2f112df3e5244p-3;
  const double dbl_min = 0x1p-1022;
  const double dbl_max = 0x1.fffffffffffffp+1023;
  const double shift = 0x1.8p52;
  const long long shift_bits = 0x4338000000000000LL;  // bits of shift
  const double ln2_hi = 0x1.62e42fee00000p-1;         // 0x3fe62e42fee00000
  const double ln2_lo = 0x1.a39ef35793c76p-33;        // 0x3dea39ef35793c76

  // Subnormal x is scaled by 2^54 (exact) into the normal range. Zero, negative, NaN and inf
  // arguments run through the same arithmetic on harmless garbage and are replaced at the end:
  // selects rather than early returns keep the function branch-free (and vectorizable).
  const bool tiny = x < dbl_min;
  const double xn = tiny ? __dmul_rn(x, 0x1p54) : x;
  long long k = tiny ? -54 : 0;

  // For positive finite x, xn is normal here. Split off the exponent; put the mantissa m in
  // [sqrt(2)/2, sqrt(2)): adding 0x95f64 << 32 to the fraction carries into bit 52 exactly when
  // the fraction is >= 0x6a09c << 32 (1.4142074... ~ sqrt(2), fdlibm's threshold), and then m
  // gets exponent -1 (m in [0.707, 1)) and k one more.
  const unsigned long long u = gr_detail_u64(xn);
  const unsigned long long frac = u & 0x000fffffffffffffULL;
  const unsigned long long carry = (frac + 0x00095f6400000000ULL) & 0x0010000000000000ULL;
  k += static_cast<long long>(u >> 52) - 1023 + static_cast<long long>(carry >> 52);
  const double m = gr_detail_from_u64(frac | (carry ^ 0x3ff0000000000000ULL));

  const double f = __dsub_rn(m, 1.0);  // exact
  const double s = __ddiv_rn(f, __dadd_rn(2.0, f));
  const double z = __dmul_rn(s, s);
  const double w = __dmul_rn(z, z);
  const double t1 = __dmul_rn(w, __dadd_rn(Lg2, __dmul_rn(w, __dadd_rn(Lg4, __dmul_rn(w, Lg6)))));
  const double t2 =
      __dmul_rn(z, __dadd_rn(Lg1, __dmul_rn(w, __dadd_rn(Lg3, __dmul_rn(w, __dadd_rn(Lg5, __dmul_rn(w, Lg7)))))));
  const double R = __dadd_rn(t2, t1);
  const double hfsq = __dmul_rn(__dmul_rn(0.5, f), f);

  // (double)k through the shift trick (|k| <= 1074 for finite x > 0), so the whole function is IEEE adds/muls.
  const double kd = __dsub_rn(gr_from_bits(shift_bits + k), shift);
  const double small = __dadd_rn(__dmul_rn(s, __dadd_rn(hfsq, R)), __dmul_rn(kd, ln2_lo));

  // log(x) = kd*ln2_hi + f - hfsq + small. The first three terms carry almost all of the value,
  // so they are summed without error and the result is rounded once at the end:
  //  - hfsq = f^2/2 exactly as hh + hl: fh = f with its low 27 bits cleared (26 significant
  //    bits), fl = f - fh (exact); hh = fh*fh/2 is exact, hl = fl*(f + fh)/2 is the rest, tiny.
  //  - d + de = f - hh exactly (Fast2Sum, |f| > hh), then hi + lo = kd*ln2_hi + d exactly
  //    (Fast2Sum, |kd*ln2_hi| >= 0.69 > |d| or kd = 0).
  const double fh = gr_detail_from_u64(gr_detail_u64(f) & 0xfffffffff8000000ULL);
  const double fl = __dsub_rn(f, fh);
  const double hh = __dmul_rn(__dmul_rn(0.5, fh), fh);
  const double hl = __dmul_rn(__dmul_rn(0.5, fl), __dadd_rn(f, fh));
  const double d = __dsub_rn(f, hh);
  const double de = __dsub_rn(__dsub_rn(f, d), hh);
  const double A = __dmul_rn(kd, ln2_hi);  // exact
  const double hi = __dadd_rn(A, d);
  const double lo = __dsub_rn(d, __dsub_rn(hi, A));
  const double y = __dadd_rn(hi, __dadd_rn(lo, __dadd_rn(de, __dsub_rn(small, hl))));

  // Positive finite x (subnormals included) is done; the rest is settled by selects, not
  // early returns, so a loop over gr_log stays branch-free (GCC vectorizes it this way).
  double special = gr_detail_from_u64(0x7ff8000000000000ULL);                  // x < 0: NaN
  special = (x == 0.0) ? gr_detail_from_u64(0xfff0000000000000ULL) : special;  // log(±0) = -inf
  special = (x > dbl_max) ? x : special;                                       // log(+inf) = +inf
  special = (x != x) ? gr_detail_quiet(x) : special;                           // NaN, quieted
  return (x > 0.0 && x <= dbl_max) ? y : special;
}

// ---- sin and cos -----------------------------------------------------------------------------
//
// After fdlibm's e_rem_pio2.c (its medium path), k_sin.c and k_cos.c (Sun Microsystems, 1993,
// notice as above; the k_cos shape is FreeBSD's later revision).
// 1. Reduce: x = n·π/2 + y, |y| <= ~π/4, y carried as y0 + y1. n = round(x·2/π) by the shift trick;
//    π/2 is split into three 33-bit pieces, so n·pio2_1 is exact for |n| < 2^20 and a second and
//    third round run only when cancellation ate the leading bits (fdlibm's exponent tests).
//    |x| <= 2^20·π/2 (~1.6e6) is the range fdlibm's medium path is exact in; beyond it n·pio2_1
//    rounds, so the result stays deterministic but loses accuracy (no Payne–Hanek), and for
//    |x| >= 2^50 (where the shift trick fails) the result is NaN. docs/detmath.md has the numbers.
// 2. sin(y0 + y1) and cos(y0 + y1) by fdlibm's minimax polynomials on [-π/4, π/4], and the
//    quadrant n mod 4 picks ±sin or ±cos.
// Special values: sin(±0) = ±0, cos(±0) = 1, ±inf → NaN (canonical), NaN → the same NaN quieted.
GR_HD static inline double gr_detail_reduce_pio2(double x, long long* n, double* y1) {
  const double invpio2 = 0x1.45f306dc9c883p-1;  // 2/π
  const double shift = 0x1.8p52;
  const double pio2_1 = 0x1.921fb544p+0, pio2_1t = 0x1.0b4611a626331p-34;  // π/2 = pio2_1 + pio2_1t
  const double pio2_2 = 0x1.0b4611a6p-34, pio2_2t = 0x1.3198a2e037073p-69;
  const double pio2_3 = 0x1.3198a2ep-69, pio2_3t = 0x1.b839a252049c1p-104;
  const double t = __dadd_rn(__dmul_rn(x, invpio2), shift);
  *n = gr_bits(t) - 0x4338000000000000LL;
  const double fn = __dsub_rn(t, shift);
  const long long ex = (gr_bits(x) >> 52) & 0x7ff;
  double r = __dsub_rn(x, __dmul_rn(fn, pio2_1));
  double w = __dmul_rn(fn, pio2_1t);
  double y = __dsub_rn(r, w);
  if (ex - ((gr_bits(y) >> 52) & 0x7ff) > 16) {  // cancellation: a second round, good to ~118 bits
    double r0 = r;
    w = __dmul_rn(fn, pio2_2);
    r = __dsub_rn(r0, w);
    w = __dsub_rn(__dmul_rn(fn, pio2_2t), __dsub_rn(__dsub_rn(r0, r), w));
    y = __dsub_rn(r, w);
    if (ex - ((gr_bits(y) >> 52) & 0x7ff) > 49) {  // and a third, ~151 bits
      r0 = r;
      w = __dmul_rn(fn, pio2_3);
      r = __dsub_rn(r0, w);
      w = __dsub_rn(__dmul_rn(fn, pio2_3t), __dsub_rn(__dsub_rn(r0, r), w));
      y = __dsub_rn(r, w);
    }
  }
  *y1 = __dsub_rn(__dsub_rn(r, y), w);
  return y;
}

// sin(x + y) for |x| <= π/4, |y| tiny (the reduction's tail).
GR_HD static inline double gr_detail_ksin(double x, double y) {
  const double S1 = -0x1.5555555555549p-3, S2 = 0x1.111111110f8a6p-7, S3 = -0x1.a01a019c161d5p-13;
  const double S4 = 0x1.71de357b1fe7dp-19, S5 = -0x1.ae5e68a2b9cebp-26, S6 = 0x1.5d93a5acfd57cp-33;
  const double z = __dmul_rn(x, x);
  const double v = __dmul_rn(z, x);
  const double r = __dadd_rn(S2, __dmul_rn(z, __dadd_rn(S3, __dmul_rn(z, __dadd_rn(S4, __dmul_rn(z, __dadd_rn(S5, __dmul_rn(z, S6))))))));
  // x - ((z·(y/2 - v·r) - y) - v·S1)
  return __dsub_rn(x, __dsub_rn(__dsub_rn(__dmul_rn(z, __dsub_rn(__dmul_rn(0.5, y), __dmul_rn(v, r))), y), __dmul_rn(v, S1)));
}

// cos(x + y) for |x| <= π/4.
GR_HD static inline double gr_detail_kcos(double x, double y) {
  const double C1 = 0x1.555555555554cp-5, C2 = -0x1.6c16c16c15177p-10, C3 = 0x1.a01a019cb159p-16;
  const double C4 = -0x1.27e4f809c52adp-22, C5 = 0x1.1ee9ebdb4b1c4p-29, C6 = -0x1.8fae9be8838d4p-37;
  const double z = __dmul_rn(x, x);
  const double w = __dmul_rn(z, z);
  const double r = __dadd_rn(__dmul_rn(z, __dadd_rn(C1, __dmul_rn(z, __dadd_rn(C2, __dmul_rn(z, C3))))),
                             __dmul_rn(__dmul_rn(w, w), __dadd_rn(C4, __dmul_rn(z, __dadd_rn(C5, __dmul_rn(z, C6))))));
  const double hz = __dmul_rn(0.5, z);
  const double a = __dsub_rn(1.0, hz);
  // a + (((1 - a) - hz) + (z·r - x·y))
  return __dadd_rn(a, __dadd_rn(__dsub_rn(__dsub_rn(1.0, a), hz), __dsub_rn(__dmul_rn(z, r), __dmul_rn(x, y))));
}

// quadrant: 0 → sin, 1 → cos (cos(x) = sin(x + π/2)).
GR_HD static inline double gr_detail_sincos(double x, long long quadrant) {
  const double huge = 0x1p50;
  if (!(gr_abs(x) < huge)) {  // ±inf, NaN, or beyond the reduction's range
    if (x != x) return gr_detail_quiet(x);
    return gr_detail_from_u64(0x7ff8000000000000ULL);
  }
  long long n = 0;
  double y1 = 0.0;
  const double y0 = gr_detail_reduce_pio2(x, &n, &y1);
  const unsigned long long q = static_cast<unsigned long long>(n + quadrant) & 3ULL;
  const double s = (q & 1ULL) ? gr_detail_kcos(y0, y1) : gr_detail_ksin(y0, y1);
  return (q & 2ULL) ? -s : s;
}

GR_HD static inline double gr_sin(double x) { return x == 0.0 ? x : gr_detail_sincos(x, 0); }  // keeps -0
GR_HD static inline double gr_cos(double x) { return gr_detail_sincos(x, 1); }

// ---- float --------------------------------------------------------------------------------------
// f32 device programs use the deterministic double functions rounded once to float, so an f32
// program gives the same bits on the host backend and on CUDA.
GR_HD static inline float gr_exp(float x) { return gr_to_float(gr_exp((double)x)); }
GR_HD static inline float gr_log(float x) { return gr_to_float(gr_log((double)x)); }
GR_HD static inline float gr_sin(float x) { return gr_to_float(gr_sin((double)x)); }
GR_HD static inline float gr_cos(float x) { return gr_to_float(gr_cos((double)x)); }

