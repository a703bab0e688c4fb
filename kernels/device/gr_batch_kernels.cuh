// gr_batch_kernels.cuh — batch gathering and loss keeping on the device, for lib/train's
// DeviceRunner (embedded at build time by lib/train/CMakeLists.txt, compiled as its own module).
//
// 8-byte arguments and grid-stride loops: the kernel rules of docs/device.md. The f32 gather rounds
// like Program::set_input does. Needs only what every backend's shim provides (__global__,
// the thread indices, __double2float_rn, GR_EXPORT_KERNEL); not part of the replay kernel text.
extern "C" __global__ void gr_gather_rows_f64(const double* src, const long long* idx, double* dst, long long width,
                                              long long rows) {
  const long long n = width * rows;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const long long r = e / width;
    dst[e] = src[idx[r] * width + (e - r * width)];
  }
}
GR_EXPORT_KERNEL(gr_gather_rows_f64)
extern "C" __global__ void gr_gather_rows_f32(const double* src, const long long* idx, float* dst, long long width,
                                              long long rows) {
  const long long n = width * rows;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const long long r = e / width;
    dst[e] = __double2float_rn(src[idx[r] * width + (e - r * width)]);
  }
}
GR_EXPORT_KERNEL(gr_gather_rows_f32)
extern "C" __global__ void gr_store_loss_f64(const double* loss, double* out, long long at) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[at] = loss[0];
}
GR_EXPORT_KERNEL(gr_store_loss_f64)
extern "C" __global__ void gr_store_loss_f32(const float* loss, double* out, long long at) {
  if (blockIdx.x == 0 && threadIdx.x == 0) out[at] = (double)loss[0];
}
GR_EXPORT_KERNEL(gr_store_loss_f32)
