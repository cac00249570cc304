// CUDA kernel of exops::weighted_mse: the (weighted) squared error elementwise, then for "mean"
// and "sum" a block reduction into one accumulator, all on torch's current stream.
#include <exops/core/weighted_mse.h>

#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAStream.h>

#include <string>
#include <vector>

#include "launch.cuh"

namespace exops {

// loss[i] = w[i] * (x[i] - y[i])^2 (w == nullptr: weight 1), rounded to scalar_t as on the CPU;
// with `total`, each block also adds its partial sum of the rounded losses to *total.
template <typename scalar_t>
__global__ void squared_error_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ y,
                                     const scalar_t* __restrict__ w, scalar_t* __restrict__ loss,
                                     at::opmath_type<scalar_t>* total, int64_t n) {
  using opmath_t = at::opmath_type<scalar_t>;
  __shared__ opmath_t partial[cuda::kThreads];
  opmath_t acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const opmath_t d = static_cast<opmath_t>(x[i]) - static_cast<opmath_t>(y[i]);
    const opmath_t v = w == nullptr ? d * d : static_cast<opmath_t>(w[i]) * d * d;
    const scalar_t rounded = static_cast<scalar_t>(v);
    if (loss != nullptr) {
      loss[i] = rounded;
    }
    acc += static_cast<opmath_t>(rounded);
  }
  if (total == nullptr) {
    return;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      partial[threadIdx.x] += partial[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(total, partial[0]);
  }
}

at::Tensor weighted_mse_cuda(const at::Tensor& input, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight,
                             c10::string_view reduction) {
  const std::string r(reduction);
  TORCH_CHECK(r == "none" || r == "mean" || r == "sum",
              "exops::weighted_mse: reduction must be 'none', 'mean' or 'sum', got '", r, "'");
  const bool weighted = weight.has_value() && weight->defined();
  std::vector<at::Tensor> operands{input, target};
  if (weighted) {
    operands.push_back(*weight);
  }
  at::ScalarType dtype = at::result_type(input, target);
  if (weighted) {
    dtype = at::promote_types(dtype, weight->scalar_type());
  }
  TORCH_CHECK(at::isFloatingType(dtype),
              "exops::weighted_mse: expected floating-point tensors, got ", dtype);
  const std::vector<at::Tensor> expanded = at::expand_outplace(operands);
  std::vector<at::Tensor> xs;
  for (const at::Tensor& t : expanded) {
    xs.push_back(t.to(dtype).contiguous());
  }
  const int64_t n = xs[0].numel();
  const c10::DeviceIndex device = input.device().index();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device);
  at::Tensor loss = r == "none" ? at::empty(xs[0].sizes(), xs[0].options()) : at::Tensor();
  at::Tensor total;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "exops::weighted_mse", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    if (r != "none") {
      total = at::zeros({}, xs[0].options().dtype(c10::CppTypeToScalarType<opmath_t>::value));
    }
    if (n > 0) {
      squared_error_kernel<scalar_t><<<cuda::blocks_for(n, device), cuda::kThreads, 0, stream>>>(
          xs[0].const_data_ptr<scalar_t>(), xs[1].const_data_ptr<scalar_t>(),
          weighted ? xs[2].const_data_ptr<scalar_t>() : nullptr,
          loss.defined() ? loss.mutable_data_ptr<scalar_t>() : nullptr,
          total.defined() ? total.mutable_data_ptr<opmath_t>() : nullptr, n);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  if (r == "none") {
    return loss;
  }
  if (r == "mean") {
    total.div_(static_cast<double>(n));     // 0/0 = nan for an empty input, as on the CPU
  }
  return total.to(dtype);
}

}  // namespace exops
