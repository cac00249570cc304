// Launch helpers shared by the CUDA kernels of exops.
#pragma once

#include <c10/core/Device.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

namespace exops {
namespace cuda {

constexpr int kThreads = 256;

// Enough blocks to fill the device (32 per multiprocessor), fewer for small inputs; kernels use
// grid-stride loops, so any element count works with a bounded grid.
inline unsigned int blocks_for(int64_t n, c10::DeviceIndex device) {
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<unsigned int>(std::max<int64_t>(
      1, std::min<int64_t>((n + kThreads - 1) / kThreads, static_cast<int64_t>(sms) * 32)));
}

}  // namespace cuda
}  // namespace exops
