// CUDA kernels of exops::soft_shrink in its three forms: functional, in-place (soft_shrink_) and
// out= (soft_shrink.out). The generated registration runs each under a device guard for `self`'s
// device and checks that `self` and `out` share it (Note [CUDA device guard] in
// codegen/dest/cpp_register.py); the kernels launch on torch's current stream.
#include <exops/core/soft_shrink.h>
#include <exops/core/soft_shrink_.h>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAStream.h>

#include "launch.cuh"

namespace exops {

template <typename scalar_t>
__global__ void soft_shrink_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y,
                                   int64_t n, double lambd) {
  using opmath_t = at::opmath_type<scalar_t>;
  const auto l = static_cast<opmath_t>(lambd);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const auto v = static_cast<opmath_t>(x[i]);
    y[i] = static_cast<scalar_t>(v > l ? v - l : (v < -l ? v + l : opmath_t(0)));
  }
}

// y = soft_shrink(x), both contiguous, of one floating dtype and device (y may be x).
static void soft_shrink_into(const char* op, const at::Tensor& x, const at::Tensor& y,
                             double lambd) {
  TORCH_CHECK(x.is_cuda(), op, ": expected self on a CUDA device, got ", x.device());
  TORCH_CHECK(lambd >= 0, "exops::soft_shrink: lambd must be non-negative, got ", lambd);
  TORCH_CHECK(at::isFloatingType(x.scalar_type()),
              "exops::soft_shrink: expected a floating-point tensor, got ", x.scalar_type());
  const int64_t n = x.numel();
  if (n == 0) {
    return;
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "exops::soft_shrink", [&] {
    soft_shrink_kernel<scalar_t>
        <<<cuda::blocks_for(n, x.device().index()), cuda::kThreads, 0, stream>>>(
            x.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(), n, lambd);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

at::Tensor soft_shrink_cuda(const at::Tensor& self, double lambd) {
  const at::Tensor x = self.contiguous();
  at::Tensor y = at::empty_like(x);
  soft_shrink_into("exops::soft_shrink", x, y, lambd);
  return y;
}

at::Tensor& soft_shrink_cuda_(at::Tensor& self, double lambd) {
  if (self.is_contiguous()) {
    soft_shrink_into("exops::soft_shrink_", self, self, lambd);
  } else {
    const at::Tensor x = self.contiguous();
    soft_shrink_into("exops::soft_shrink_", x, x, lambd);
    self.copy_(x);
  }
  return self;
}

at::Tensor& soft_shrink_out_cuda(const at::Tensor& self, double lambd, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "exops::soft_shrink.out: out has dtype ",
              out.scalar_type(), " but self has dtype ", self.scalar_type());
  // Resizes `out` to self's shape (with torch's warning when a non-empty out is resized).
  at::native::resize_output(out, self.sizes());
  const at::Tensor x = self.contiguous();
  if (out.is_contiguous()) {
    soft_shrink_into("exops::soft_shrink.out", x, out, lambd);
  } else {
    at::Tensor y = at::empty_like(x);
    soft_shrink_into("exops::soft_shrink.out", x, y, lambd);
    out.copy_(y);
  }
  return out;
}

}  // namespace exops
