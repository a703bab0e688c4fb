// broadcast.h — numpy broadcasting index maps.
//
// Trailing dims align; a size-1 or missing dim of an input stretches over the output. For every
// flat output index e (row-major, ascending) the map yields the flat input indices ia(e), ib(e).
// Forward reads a[ia(e)], b[ib(e)]; backward walks e ascending and adds into slot[ia(e)], which is
// exactly the §5 order ("each slot sums its contributions in row-major subsequence order").
#pragma once
#include <cstdint>

#include "tensor/shape.h"

namespace gr {

struct BroadcastMap {
  Shape out;
  bool same = false;                  // a, b and out all have one shape: ia = ib = e
  int64_t a_stride[kMaxDims] = {};    // a's strides aligned into out's dims, 0 where stretched
  int64_t b_stride[kMaxDims] = {};
};

// Throws gr::Error naming both shapes when they do not broadcast.
BroadcastMap broadcast_map(const Shape& a, const Shape& b);

// Strides of `in` aligned into `out` (0 on stretched or missing dims). `in` must broadcast to out.
void aligned_strides(const Shape& in, const Shape& out, int64_t* strides);

// Calls f(e, ia, ib) for every output element in ascending e.
template <class F>
void for_each_broadcast(const BroadcastMap& m, F&& f) {
  const int64_t n = m.out.numel();
  if (m.same) {
    for (int64_t e = 0; e < n; ++e) f(e, e, e);
    return;
  }
  const int r = m.out.rank();
  const int64_t inner = m.out[r - 1];
  const int64_t sa = m.a_stride[r - 1], sb = m.b_stride[r - 1];
  int64_t idx[kMaxDims] = {};
  int64_t ia = 0, ib = 0;
  for (int64_t e = 0; e < n; e += inner) {
    for (int64_t j = 0; j < inner; ++j) f(e + j, ia + j * sa, ib + j * sb);
    for (int d = r - 2; d >= 0; --d) {  // advance the odometer over the outer dims
      ia += m.a_stride[d];
      ib += m.b_stride[d];
      if (++idx[d] < m.out[d]) break;
      ia -= m.a_stride[d] * m.out[d];
      ib -= m.b_stride[d] * m.out[d];
      idx[d] = 0;
    }
  }
}

}  // namespace gr
