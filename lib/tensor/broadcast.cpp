#include "tensor/broadcast.h"

#include <algorithm>

namespace gr {

void aligned_strides(const Shape& in, const Shape& out, int64_t* strides) {
  const Strides own = row_major_strides(in);
  const int offset = out.rank() - in.rank();
  for (int d = 0; d < out.rank(); ++d) {
    const int k = d - offset;
    strides[d] = (k < 0 || in[k] == 1) ? 0 : own.s[k];
  }
}

BroadcastMap broadcast_map(const Shape& a, const Shape& b) {
  const int r = std::max(a.rank(), b.rank());
  int64_t dims[kMaxDims];
  for (int d = 0; d < r; ++d) {
    const int ka = d - (r - a.rank()), kb = d - (r - b.rank());
    const int64_t da = ka < 0 ? 1 : a[ka], db = kb < 0 ? 1 : b[kb];
    if (da != db && da != 1 && db != 1)
      throw Error("shapes " + a.str() + " and " + b.str() + " do not broadcast (dim " +
                  std::to_string(d) + ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    dims[d] = std::max(da, db);
  }
  BroadcastMap m{Shape(std::span<const int64_t>(dims, static_cast<size_t>(r)))};
  m.same = (a == m.out) && (b == m.out);
  aligned_strides(a, m.out, m.a_stride);
  aligned_strides(b, m.out, m.b_stride);
  return m;
}

}  // namespace gr
