// test_detmath.cpp — gr_exp / gr_log / gr_sin / gr_cos (kernels/gr_math.h): faithful (< 1 ulp) over the whole
// range against an x87 long-double reference, every special value bit-exact, and purity.
//
// The reference is expl/logl on x86-64 (64-bit significand, error ~2^-63 relative, i.e. about
// 2^-10 of a double ulp), far tighter than the 1-ulp bound being checked. Inputs come from a
// fixed-seed SplitMix64, so every run checks exactly the same ~3.7 million arguments.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "gr_math.h"

namespace {

static_assert(std::numeric_limits<long double>::digits >= 64, "the reference needs x87 80-bit long double (or better)");

std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
double from_bits(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
bool same_bits(double a, double b) { return bits_of(a) == bits_of(b); }

// SplitMix64 (Steele, Lea, Flood 2014), written out so the inputs never depend on the library.
struct SplitMix64 {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  double uniform(double a, double b) { return a + (b - a) * unit(); }
  long long below(long long n) { return static_cast<long long>(next() % static_cast<std::uint64_t>(n)); }
};

constexpr double kDenormMin = std::numeric_limits<double>::denorm_min();  // 2^-1074
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kExpOver = 0x1.62e42fefa39efp+9;    // largest x with finite exp(x)
constexpr double kExpUnder = -0x1.74910d52d3051p+9;  // smallest x with exp(x) rounding to > 0

// The spacing of doubles in the binade of |ref|: 2^(e-52) for |ref| in [2^e, 2^(e+1)), and the
// subnormal spacing 2^-1074 below 2^-1022. "result within 1 such ulp of ref" is faithfulness.
long double ulp_of(long double ref) {
  ref = std::fabs(ref);
  if (ref < 0x1p-1022L) return 0x1p-1074L;
  int e = 0;
  std::frexp(ref, &e);  // ref = m * 2^e, m in [0.5, 1): binade 2^(e-1)
  return std::ldexp(1.0L, e - 53);
}

double ulp_error(double got, long double ref) {
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) / ulp_of(ref));
}

struct Worst {
  const char* name;
  double err = 0.0;
  double at = 0.0;
  long n = 0;
  void add(double x, double got, long double ref) {
    const double e = ulp_error(got, ref);
    ++n;
    if (!(e <= err)) {  // also catches NaN
      err = e;
      at = x;
    }
  }
  void report() const { std::printf("%s: worst %.4f ulp at x=%a (%.17g) over %ld inputs\n", name, err, at, at, n); }
};

void check_exp(Worst& w, double x) {
  if (x > kExpOver || x < kExpUnder) return;  // the saturated ends are checked exactly elsewhere
  w.add(x, gr_exp(x), std::exp(static_cast<long double>(x)));
}
void check_log(Worst& w, double x) { w.add(x, gr_log(x), std::log(static_cast<long double>(x))); }

}  // namespace

TEST_CASE("detmath: gr_exp is faithful (< 1 ulp) over [-745.2, 709.8]", "[detmath]") {
  SplitMix64 rng{0x5eed0001ULL};
  Worst w{"gr_exp"};

  // Uniform in value over the whole finite-result range.
  for (int i = 0; i < 1000000; ++i) check_exp(w, rng.uniform(-745.2, 709.8));
  // Dense near 0: |x| = 2^e * (1 + u), e in [-60, 0), both signs; below 2^-54 exp is 1 anyway.
  for (int i = 0; i < 300000; ++i) {
    const double x = std::ldexp(1.0 + rng.unit(), -1 - static_cast<int>(rng.below(60)));
    check_exp(w, (i & 1) ? -x : x);
  }
  // Tiny and subnormal arguments, random bit patterns below 2^-54.
  for (int i = 0; i < 20000; ++i) {
    const double x = from_bits(rng.next() % 0x3c90000000000000ULL);
    check_exp(w, (i & 1) ? -x : x);
  }
  // Near overflow: the last 2 units below the threshold, and the last 2000 doubles exactly.
  for (int i = 0; i < 200000; ++i) check_exp(w, rng.uniform(kExpOver - 2.0, kExpOver));
  for (std::uint64_t b = bits_of(kExpOver) - 2000; b <= bits_of(kExpOver); ++b) check_exp(w, from_bits(b));
  // Subnormal and near-subnormal results: x in [u_threshold, -707], and the first 2000 doubles.
  for (int i = 0; i < 400000; ++i) check_exp(w, rng.uniform(kExpUnder, -707.0));
  for (std::uint64_t b = bits_of(kExpUnder) - 2000; b <= bits_of(kExpUnder); ++b) check_exp(w, from_bits(b));
  // Where k = round(x/ln2) switches: x near (j + 1/2)*ln2, within ~2^-20 relative.
  for (int j = -1076; j <= 1024; ++j) {
    const double c = (j + 0.5) * 0.69314718055994530942;
    for (int i = 0; i < 100; ++i) check_exp(w, c * (1.0 + rng.uniform(-0x1p-20, 0x1p-20)));
  }

  w.report();
  REQUIRE(w.n >= 1900000);
  REQUIRE(w.err < 1.0);
}

TEST_CASE("detmath: gr_log is faithful (< 1 ulp) over all positive doubles", "[detmath]") {
  SplitMix64 rng{0x5eed0002ULL};
  Worst w{"gr_log"};

  // Random bit patterns of positive finite doubles: log-uniform over the whole range.
  for (int i = 0; i < 1000000; ++i) {
    std::uint64_t b;
    do b = rng.next() >> 1;
    while ((b >> 52) == 0x7ff || b == 0);
    check_log(w, from_bits(b));
  }
  // Subnormals with every number of leading zero bits.
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t b = (rng.next() & 0x000fffffffffffffULL) >> rng.below(52);
    if (b != 0) check_log(w, from_bits(b));
  }
  // Dense near 1, where log(x) ~ x - 1 is tiny and cancellation would show: 1 ± 2^-e * (1 + u).
  for (int i = 0; i < 400000; ++i) {
    const double d = std::ldexp(1.0 + rng.unit(), -1 - static_cast<int>(rng.below(60)));
    check_log(w, (i & 1) ? 1.0 - 0.5 * d : 1.0 + d);
  }
  for (std::uint64_t b = bits_of(1.0) - 5000; b <= bits_of(1.0) + 5000; ++b) check_log(w, from_bits(b));
  // The reduction's switch near sqrt(2) (fraction 0x6a09c << 32), in several binades.
  for (int e : {-1060, -1022, -300, -1, 0, 1, 300, 1023}) {
    const std::uint64_t mid = 0x3ff6a09c00000000ULL;
    for (std::uint64_t b = mid - 500; b <= mid + 500; ++b) check_log(w, std::ldexp(from_bits(b), e));
  }
  // Range ends: just above the smallest subnormal and DBL_MIN, just below DBL_MAX.
  for (std::uint64_t b = 1; b <= 2000; ++b) check_log(w, from_bits(b));
  for (std::uint64_t b = bits_of(DBL_MIN) - 1000; b <= bits_of(DBL_MIN) + 1000; ++b) check_log(w, from_bits(b));
  for (std::uint64_t b = bits_of(DBL_MAX) - 2000; b <= bits_of(DBL_MAX); ++b) check_log(w, from_bits(b));

  w.report();
  REQUIRE(w.n >= 1500000);
  REQUIRE(w.err < 1.0);
}

TEST_CASE("detmath: gr_exp special values are exact", "[detmath]") {
  CHECK(same_bits(gr_exp(0.0), 1.0));
  CHECK(same_bits(gr_exp(-0.0), 1.0));
  CHECK(same_bits(gr_exp(kInf), kInf));
  CHECK(same_bits(gr_exp(-kInf), 0.0));  // +0, not -0
  const double qnan = std::numeric_limits<double>::quiet_NaN();
  const double snan = std::numeric_limits<double>::signaling_NaN();
  CHECK(gr_exp(qnan) != gr_exp(qnan));
  CHECK(gr_exp(-qnan) != gr_exp(-qnan));
  CHECK(gr_exp(snan) != gr_exp(snan));
  // NaN in -> the same NaN, quieted (integer ops, so no chip-dependent payload).
  CHECK(bits_of(gr_exp(snan)) == (bits_of(snan) | 0x0008000000000000ULL));
  CHECK(same_bits(gr_exp(qnan), qnan));

  // Tiny arguments: exp(x) = 1 to within far less than half an ulp.
  for (double x : {kDenormMin, -kDenormMin, DBL_MIN, -DBL_MIN, 0x1p-60, -0x1p-60}) CHECK(same_bits(gr_exp(x), 1.0));

  // The thresholds really are the rounding boundaries (checked against the reference, so the
  // constants are not just copied from the implementation).
  const long double two_1024 = std::ldexp(1.0L, 1024);
  const long double two_m1075 = std::ldexp(1.0L, -1075);
  CHECK(std::exp(static_cast<long double>(kExpOver)) < static_cast<long double>(DBL_MAX));
  CHECK(std::exp(static_cast<long double>(std::nextafter(kExpOver, kInf))) > two_1024);
  CHECK(std::exp(static_cast<long double>(kExpUnder)) > two_m1075);
  CHECK(std::exp(static_cast<long double>(std::nextafter(kExpUnder, -kInf))) < two_m1075);

  // Overflow side.
  const double top = gr_exp(kExpOver);
  CHECK(top <= DBL_MAX);
  CHECK(ulp_error(top, std::exp(static_cast<long double>(kExpOver))) < 1.0);
  CHECK(same_bits(gr_exp(std::nextafter(kExpOver, kInf)), kInf));
  CHECK(same_bits(gr_exp(710.0), kInf));
  CHECK(same_bits(gr_exp(1000.0), kInf));
  CHECK(same_bits(gr_exp(DBL_MAX), kInf));
  // Underflow side: down through the subnormals to +0 (never -0).
  CHECK(same_bits(gr_exp(kExpUnder), kDenormMin));
  CHECK(same_bits(gr_exp(std::nextafter(kExpUnder, -kInf)), 0.0));
  CHECK(same_bits(gr_exp(-746.0), 0.0));
  CHECK(same_bits(gr_exp(-1000.0), 0.0));
  CHECK(same_bits(gr_exp(-DBL_MAX), 0.0));
  CHECK(gr_exp(-740.0) > 0.0);
  CHECK(gr_exp(-740.0) < DBL_MIN);  // a subnormal result
  CHECK(ulp_error(gr_exp(-740.0), std::exp(-740.0L)) < 1.0);
  // exp(log(DBL_MIN)) lands at the normal/subnormal boundary.
  CHECK(ulp_error(gr_exp(-708.3964185322641), std::exp(static_cast<long double>(-708.3964185322641))) < 1.0);

  // exp(1) is e (the correctly rounded value is 0x1.5bf0a8b145769p+1).
  CHECK(ulp_error(gr_exp(1.0), std::exp(1.0L)) < 1.0);
  CHECK(std::fabs(gr_exp(1.0) - 0x1.5bf0a8b145769p+1) <= 0x1p-51);
  CHECK(ulp_error(gr_exp(-1.0), std::exp(-1.0L)) < 1.0);
  // Integer multiples of ln2 give (nearly) powers of two.
  for (int k = -1074; k <= 1023; k += 7) {
    const double x = k * 0.69314718055994530942;
    CHECK(ulp_error(gr_exp(x), std::exp(static_cast<long double>(x))) < 1.0);
  }
}

TEST_CASE("detmath: gr_log special values are exact", "[detmath]") {
  CHECK(same_bits(gr_log(0.0), -kInf));
  CHECK(same_bits(gr_log(-0.0), -kInf));
  CHECK(same_bits(gr_log(kInf), kInf));
  CHECK(same_bits(gr_log(1.0), 0.0));  // +0 bit-exactly
  const double qnan = std::numeric_limits<double>::quiet_NaN();
  const double snan = std::numeric_limits<double>::signaling_NaN();
  CHECK(gr_log(qnan) != gr_log(qnan));
  CHECK(gr_log(-qnan) != gr_log(-qnan));
  CHECK(bits_of(gr_log(snan)) == (bits_of(snan) | 0x0008000000000000ULL));
  CHECK(same_bits(gr_log(-qnan), -qnan));
  // Negative arguments: the canonical quiet NaN, the same bits on every path.
  for (double x : {-kInf, -DBL_MAX, -1.0, -DBL_MIN, -kDenormMin}) {
    const double y = gr_log(x);
    CHECK(y != y);
    CHECK(bits_of(y) == 0x7ff8000000000000ULL);
  }

  // Range ends.
  CHECK(ulp_error(gr_log(kDenormMin), std::log(static_cast<long double>(kDenormMin))) < 1.0);
  CHECK(ulp_error(gr_log(DBL_MIN), std::log(static_cast<long double>(DBL_MIN))) < 1.0);
  CHECK(ulp_error(gr_log(DBL_MAX), std::log(static_cast<long double>(DBL_MAX))) < 1.0);
  CHECK(gr_log(kDenormMin) < -744.4);
  CHECK(gr_log(DBL_MAX) > 709.78);

  // log(2^k) = k*ln2 for every exponent, subnormal powers included; log(2) is ln2 correctly
  // rounded, log(1/2) its negation.
  CHECK(same_bits(gr_log(2.0), 0x1.62e42fefa39efp-1));
  CHECK(same_bits(gr_log(0.5), -0x1.62e42fefa39efp-1));
  const long double ln2 = 0.693147180559945309417232121458176568L;
  for (int k = -1074; k <= 1023; ++k) {
    const double x = std::ldexp(1.0, k);
    INFO("k = " << k);
    CHECK(ulp_error(gr_log(x), k * ln2) < 1.0);
    if (k != 0) CHECK((gr_log(x) < 0.0) == (k < 0));
  }

  // Around 1 and e.
  for (double x : {std::nextafter(1.0, 0.0), std::nextafter(1.0, 2.0)})
    CHECK(ulp_error(gr_log(x), std::log(static_cast<long double>(x))) < 1.0);
  CHECK(gr_log(std::nextafter(1.0, 0.0)) < 0.0);
  CHECK(gr_log(std::nextafter(1.0, 2.0)) > 0.0);
  CHECK(std::fabs(gr_log(0x1.5bf0a8b145769p+1) - 1.0) <= 0x1p-52);
}

// sin/cos (issue 16): faithful where the reduction is exact, |x| <= 2^20·π/2; beyond it the error is
// absolute, at most about ulp(x)/2 — the argument's own rounding — and still deterministic.
TEST_CASE("detmath: gr_sin / gr_cos are faithful (< 1 ulp) for |x| <= 2^20·pi/2", "[detmath]") {
  SplitMix64 rng{0x5eed0003ULL};
  Worst ws{"gr_sin"}, wc{"gr_cos"};
  auto both = [&](double x) {
    ws.add(x, gr_sin(x), std::sin(static_cast<long double>(x)));
    wc.add(x, gr_cos(x), std::cos(static_cast<long double>(x)));
  };
  const double limit = 0x1p20 * 1.5707963267948966;
  for (double range : {0.785, 4.0, 100.0, limit})
    for (int i = 0; i < 300000; ++i) both(rng.uniform(-range, range));
  // Tiny arguments (sin x = x, cos x = 1 to within far less than an ulp) and subnormals.
  for (int i = 0; i < 20000; ++i) both(std::ldexp(1.0 + rng.unit(), -1 - static_cast<int>(rng.below(1070))) * ((i & 1) ? -1 : 1));
  // Near multiples of π/2, where the reduction cancels most bits: the nearest doubles to k·π/2.
  for (long k = 1; k < 100000; k += 1 + static_cast<long>(rng.below(7))) {
    const double c = static_cast<double>(static_cast<long double>(k) * 1.57079632679489661923132169163975144L);
    for (double x = std::nextafter(std::nextafter(c, 0.0), 0.0), n = 0; n < 5; ++n, x = std::nextafter(x, 1e300)) both(x);
  }
  ws.report();
  wc.report();
  REQUIRE(ws.n >= 1300000);
  REQUIRE(ws.err < 1.0);
  REQUIRE(wc.err < 1.0);
  // Beyond: absolute error within ulp(x)/2 plus a little, deterministic.
  for (int i = 0; i < 200000; ++i) {
    const double x = rng.uniform(limit, 1e15) * ((i & 1) ? -1 : 1);
    INFO("x = " << x);
    REQUIRE(std::fabs(static_cast<long double>(gr_sin(x)) - std::sin(static_cast<long double>(x))) <= std::fabs(x) * 0x1.2p-53);
  }
  // Special values.
  CHECK(bits_of(gr_sin(-0.0)) == bits_of(-0.0));
  CHECK(bits_of(gr_sin(0.0)) == bits_of(0.0));
  CHECK(gr_cos(0.0) == 1.0);
  CHECK(bits_of(gr_sin(INFINITY)) == 0x7ff8000000000000ULL);
  CHECK(bits_of(gr_cos(-INFINITY)) == 0x7ff8000000000000ULL);
  CHECK(std::isnan(gr_sin(0x1p50)));
  const double nan_payload = from_bits(0x7ff0000000000123ULL);
  CHECK(bits_of(gr_sin(nan_payload)) == 0x7ff8000000000123ULL);
}

TEST_CASE("detmath: gr_exp / gr_log are pure: same argument, same bits", "[detmath]") {
  // Call twice from run-time data, and compare with what the compiler may fold at compile time
  // from literal arguments (the header is plain IEEE arithmetic, so folding must agree too).
  SplitMix64 rng{0x5eed0003ULL};
  int mismatches = 0;
  for (int i = 0; i < 100000; ++i) {
    const double x = from_bits(rng.next());
    const double a = gr_exp(x), b = gr_exp(x);
    const double c = gr_log(x), d = gr_log(x);
    if (!same_bits(a, b) || !same_bits(c, d)) ++mismatches;
  }
  CHECK(mismatches == 0);

  // A plain loop over an array (which the compiler may vectorize) against one call at a time
  // through a volatile function pointer (which it cannot inline): the same bits.
  std::vector<double> xs(4096), ye(xs.size()), yl(xs.size());
  for (double& x : xs) x = (rng.next() & 1) ? rng.uniform(-750.0, 750.0) : from_bits(rng.next());
  const double edge[] = {0.0, -0.0, kInf, -kInf, kDenormMin, -1.0, 1.0, kExpOver, kExpUnder};
  std::copy(std::begin(edge), std::end(edge), xs.begin());
  for (std::size_t i = 0; i < xs.size(); ++i) ye[i] = gr_exp(xs[i]);
  for (std::size_t i = 0; i < xs.size(); ++i) yl[i] = gr_log(xs[i]);
  double (*volatile exp_fn)(double) = gr_exp;
  double (*volatile log_fn)(double) = gr_log;
  int loop_mismatches = 0;
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (!same_bits(ye[i], exp_fn(xs[i])) || !same_bits(yl[i], log_fn(xs[i]))) ++loop_mismatches;
  CHECK(loop_mismatches == 0);

  volatile double v_half = 0.5, v_m700 = -700.0, v_3 = 3.0, v_tiny = 0x1p-1070;
  CHECK(same_bits(gr_exp(v_half), gr_exp(0.5)));
  CHECK(same_bits(gr_exp(v_m700), gr_exp(-700.0)));
  CHECK(same_bits(gr_log(v_3), gr_log(3.0)));
  CHECK(same_bits(gr_log(v_tiny), gr_log(0x1p-1070)));
}
