// batch_kernels.h — the device kernels DeviceRunner uses to gather a batch's rows and keep the
// per-step losses: the text of kernels/device/gr_batch_kernels.cuh, embedded at build time
// (lib/train/CMakeLists.txt, cmake/embed_text.cmake) and compiled as the "gradrun_batches" module.
#pragma once
#include <string>

namespace gr {

const std::string& batch_kernel_text();

}  // namespace gr
