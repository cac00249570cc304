// CUDA kernels of exstable on torch's stable ABI: scale (functional, in-place, out=) and
// masked_sum. The stream comes from the C shim (aoti_torch_get_current_cuda_stream, declared
// with USE_CUDA, which the build defines for stable .cu files; docs/STABLE_ABI.md); the
// generated registration runs each kernel under torch::stable::accelerator::DeviceGuard.
#include <exstable/stable.h>

#include "checks.h"

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/Exception.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace exstable {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

constexpr int kThreads = 256;

template <typename T>
__global__ void multiply_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                T* __restrict__ out, int64_t n, T alpha) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = x[i] * (y == nullptr ? alpha : y[i]);
  }
}

static cudaStream_t current_stream(const Tensor& t) {
  void* stream = nullptr;
  STD_TORCH_CHECK(aoti_torch_get_current_cuda_stream(t.get_device_index(), &stream) ==
                      AOTI_TORCH_SUCCESS,
                  "exstable: cannot get the current CUDA stream");
  return static_cast<cudaStream_t>(stream);
}

static void check_cuda(const char* op, const Tensor& t) {
  const ScalarType dtype = t.scalar_type();
  STD_TORCH_CHECK(dtype == ScalarType::Float || dtype == ScalarType::Double, op,
                  ": expected a float32 or float64 tensor");
  STD_TORCH_CHECK(t.is_cuda(), op, ": expected a CUDA tensor");
}

// out = x * (y or alpha), all contiguous, of one dtype and device (out may be x).
static void multiply(const Tensor& x, const Tensor* y, const Tensor& out, double alpha) {
  const int64_t n = x.numel();
  if (n == 0) {
    return;
  }
  const unsigned int blocks =
      static_cast<unsigned int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
  const cudaStream_t stream = current_stream(x);
  if (x.scalar_type() == ScalarType::Float) {
    multiply_kernel<float><<<blocks, kThreads, 0, stream>>>(
        static_cast<const float*>(x.const_data_ptr()),
        y ? static_cast<const float*>(y->const_data_ptr()) : nullptr,
        static_cast<float*>(out.mutable_data_ptr()), n, static_cast<float>(alpha));
  } else {
    multiply_kernel<double><<<blocks, kThreads, 0, stream>>>(
        static_cast<const double*>(x.const_data_ptr()),
        y ? static_cast<const double*>(y->const_data_ptr()) : nullptr,
        static_cast<double*>(out.mutable_data_ptr()), n, alpha);
  }
  const cudaError_t err = cudaGetLastError();
  STD_TORCH_CHECK(err == cudaSuccess, "exstable: CUDA kernel launch failed: ",
                  cudaGetErrorString(err));
}


Tensor scale_cuda(const Tensor& self, double alpha) {
  check_cuda("exstable::scale", self);
  Tensor in = torch::stable::contiguous(self);
  Tensor out = torch::stable::empty_like(in);
  multiply(in, nullptr, out, alpha);
  return out;
}

Tensor scale_cuda_(Tensor& self, double alpha) {
  check_cuda("exstable::scale_", self);
  checks::into_strided(self, [&](const Tensor& dst) { multiply(dst, nullptr, dst, alpha); });
  return self;
}

Tensor scale_out_cuda(const Tensor& self, double alpha, Tensor& out) {
  check_cuda("exstable::scale.out", self);
  checks::out_like(self, out);
  const Tensor in = torch::stable::contiguous(self);
  checks::into_strided(out, [&](const Tensor& dst) { multiply(in, nullptr, dst, alpha); });
  return out;
}

Tensor masked_sum_cuda(const Tensor& self,
                       std::optional<torch::headeronly::HeaderOnlyArrayRef<int64_t>> dim,
                       bool keepdim, const std::optional<Tensor>& mask) {
  check_cuda("exstable::masked_sum", self);
  Tensor x = torch::stable::contiguous(self);
  if (mask.has_value()) {
    checks::mask_like(self, *mask);
    Tensor m = torch::stable::contiguous(*mask);
    Tensor prod = torch::stable::empty_like(x);
    multiply(x, &m, prod, 1.0);
    x = prod;
  }
  // The reduction itself is torch's (through the stable ABI), on the same current stream.
  return torch::stable::sum(x, dim, keepdim, self.scalar_type());
}

}  // namespace exstable
