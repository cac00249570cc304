// CUDA kernels of exops::smooth_clamp and exops::smooth_clamp_backward. Compiled only when torch
// has CUDA (generated/build.ninja's `cu` rule); otherwise the build skips this file and the
// registration leaves out the CUDA block.
#include <exops/core/smooth_clamp.h>
#include <exops/core/smooth_clamp_backward.h>

#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

namespace exops {

// Helpers are `static` (templates need nothing), not in an anonymous namespace: nvcc hands gcc a
// named namespace for it, which -Werror=missing-declarations (the kernel signature check) rejects.
constexpr int kThreads = 256;

// Grid-stride loops: any element count with a bounded grid.
template <typename scalar_t>
__global__ void smooth_clamp_forward_kernel(const scalar_t* __restrict__ x,
                                            scalar_t* __restrict__ y, int64_t n, float limit) {
  using acc_t = at::acc_type<scalar_t, /*is_cuda=*/true>;
  const acc_t l = static_cast<acc_t>(limit);
  const acc_t inv = acc_t(1) / l;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    y[i] = static_cast<scalar_t>(l * tanh(static_cast<acc_t>(x[i]) * inv));
  }
}

template <typename scalar_t>
__global__ void smooth_clamp_backward_kernel(const scalar_t* __restrict__ grad,
                                             const scalar_t* __restrict__ x,
                                             scalar_t* __restrict__ out, int64_t n, float limit) {
  using acc_t = at::acc_type<scalar_t, /*is_cuda=*/true>;
  const acc_t inv = acc_t(1) / static_cast<acc_t>(limit);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const acc_t t = tanh(static_cast<acc_t>(x[i]) * inv);
    out[i] = static_cast<scalar_t>(static_cast<acc_t>(grad[i]) * (acc_t(1) - t * t));
  }
}

// Enough blocks to fill the device (32 per multiprocessor), fewer for small inputs.
static unsigned int blocks_for(int64_t n, c10::DeviceIndex device) {
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<unsigned int>(std::max<int64_t>(
      1, std::min<int64_t>((n + kThreads - 1) / kThreads, static_cast<int64_t>(sms) * 32)));
}

static void check(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), op, ": expected ", name, " on a CUDA device, got ", t.device());
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": expected a floating-point ", name,
              ", got ", t.scalar_type());
}

at::Tensor smooth_clamp_cuda(const at::Tensor& self, double limit) {
  check("exops::smooth_clamp", self, "self");
  TORCH_CHECK(limit > 0, "exops::smooth_clamp: limit must be positive, got ", limit);
  const c10::cuda::CUDAGuard guard(self.device());
  const at::Tensor x = self.contiguous();
  at::Tensor y = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) {
    return y;
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(self.device().index());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "exops::smooth_clamp", [&] {
    smooth_clamp_forward_kernel<scalar_t><<<blocks_for(n, self.device().index()), kThreads, 0, stream>>>(
        x.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(), n,
        static_cast<float>(limit));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

at::Tensor smooth_clamp_backward_cuda(const at::Tensor& grad_output, const at::Tensor& self,
                                      double limit) {
  check("exops::smooth_clamp_backward", grad_output, "grad_output");
  check("exops::smooth_clamp_backward", self, "self");
  TORCH_CHECK(limit > 0, "exops::smooth_clamp_backward: limit must be positive, got ", limit);
  TORCH_CHECK(grad_output.sizes() == self.sizes() &&
                  grad_output.scalar_type() == self.scalar_type() &&
                  grad_output.device() == self.device(),
              "exops::smooth_clamp_backward: grad_output and self must have the same shape, "
              "dtype and device");
  const c10::cuda::CUDAGuard guard(self.device());
  const at::Tensor g = grad_output.contiguous();
  const at::Tensor x = self.contiguous();
  at::Tensor out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) {
    return out;
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(self.device().index());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "exops::smooth_clamp_backward", [&] {
    smooth_clamp_backward_kernel<scalar_t><<<blocks_for(n, self.device().index()), kThreads, 0, stream>>>(
        g.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
        out.mutable_data_ptr<scalar_t>(), n, static_cast<float>(limit));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace exops
