// Pointwise CPU kernels of exops: scaled_add, soft_shrink (functional, in-place, out=),
// smooth_clamp and its backward. Each builds an at::TensorIterator (broadcasting, dtype
// promotion, output allocation, threading) and supplies the per-element function.
// The headers of the ops defined here only: editing another op recompiles nothing here.
#include <exops/core/scaled_add.h>
#include <exops/core/soft_shrink.h>
#include <exops/core/soft_shrink_.h>
#include <exops/core/smooth_clamp.h>
#include <exops/core/smooth_clamp_backward.h>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>

#include <cmath>

#include "elementwise.h"

namespace exops {

namespace {

void check_cpu(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), op, ": expected ", name, " on the CPU, got ", t.device());
}

void check_floating(const char* op, at::ScalarType dtype) {
  TORCH_CHECK(at::isFloatingType(dtype), op, ": expected a floating-point tensor, got ", dtype);
}

// Soft thresholding into the single output of `iter` (one input of the same dtype).
void soft_shrink_kernel(at::TensorIteratorBase& iter, double lambd) {
  TORCH_CHECK(lambd >= 0, "exops::soft_shrink: lambd must be non-negative, got ", lambd);
  check_floating("exops::soft_shrink", iter.common_dtype());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, iter.common_dtype(),
                                  "exops::soft_shrink", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    const auto l = static_cast<opmath_t>(lambd);
    detail::elementwise<scalar_t, 1>(iter, [l](scalar_t x) {
      const auto v = static_cast<opmath_t>(x);
      return static_cast<scalar_t>(v > l ? v - l : (v < -l ? v + l : opmath_t(0)));
    });
  });
}

}  // namespace

at::Tensor scaled_add_cpu(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  check_cpu("exops::scaled_add", self, "self");
  check_cpu("exops::scaled_add", other, "other");
  auto iter = at::TensorIteratorConfig()
                  .add_owned_output(at::Tensor())
                  .add_const_input(self)
                  .add_const_input(other)
                  .promote_inputs_to_common_dtype(true)
                  .cast_common_dtype_to_outputs(true)
                  .build();
  const auto dtype = iter.common_dtype();
  TORCH_CHECK(dtype != at::kBool, "exops::scaled_add: boolean tensors are not supported");
  TORCH_CHECK(!(at::isIntegralType(dtype, /*includeBool=*/false) && alpha.isFloatingPoint()),
              "exops::scaled_add: for integer tensors alpha must be an integer, got ",
              alpha.toDouble());
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "exops::scaled_add", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    const auto a = alpha.to<opmath_t>();
    detail::elementwise<scalar_t, 2>(iter, [a](scalar_t x, scalar_t y) {
      return static_cast<scalar_t>(static_cast<opmath_t>(x) + a * static_cast<opmath_t>(y));
    });
  });
  return iter.output();
}

at::Tensor soft_shrink_cpu(const at::Tensor& self, double lambd) {
  check_cpu("exops::soft_shrink", self, "self");
  auto iter =
      at::TensorIteratorConfig().add_owned_output(at::Tensor()).add_const_input(self).build();
  soft_shrink_kernel(iter, lambd);
  return iter.output();
}

at::Tensor& soft_shrink_cpu_(at::Tensor& self, double lambd) {
  check_cpu("exops::soft_shrink_", self, "self");
  auto iter = at::TensorIteratorConfig().add_output(self).add_const_input(self).build();
  soft_shrink_kernel(iter, lambd);
  return self;
}

at::Tensor& soft_shrink_out_cpu(const at::Tensor& self, double lambd, at::Tensor& out) {
  check_cpu("exops::soft_shrink.out", self, "self");
  check_cpu("exops::soft_shrink.out", out, "out");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "exops::soft_shrink.out: out has dtype ",
              out.scalar_type(), " but self has dtype ", self.scalar_type());
  // Resizes `out` to self's shape (with torch's warning when a non-empty out is resized).
  auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(self).build();
  soft_shrink_kernel(iter, lambd);
  return out;
}

at::Tensor smooth_clamp_cpu(const at::Tensor& self, double limit) {
  check_cpu("exops::smooth_clamp", self, "self");
  TORCH_CHECK(limit > 0, "exops::smooth_clamp: limit must be positive, got ", limit);
  auto iter =
      at::TensorIteratorConfig().add_owned_output(at::Tensor()).add_const_input(self).build();
  check_floating("exops::smooth_clamp", iter.common_dtype());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, iter.common_dtype(),
                                  "exops::smooth_clamp", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    const auto l = static_cast<opmath_t>(limit);
    const auto inv = opmath_t(1) / l;
    detail::elementwise<scalar_t, 1>(iter, [l, inv](scalar_t x) {
      return static_cast<scalar_t>(l * std::tanh(static_cast<opmath_t>(x) * inv));
    });
  });
  return iter.output();
}

at::Tensor smooth_clamp_backward_cpu(const at::Tensor& grad_output, const at::Tensor& self,
                                     double limit) {
  check_cpu("exops::smooth_clamp_backward", grad_output, "grad_output");
  check_cpu("exops::smooth_clamp_backward", self, "self");
  TORCH_CHECK(limit > 0, "exops::smooth_clamp_backward: limit must be positive, got ", limit);
  auto iter = at::TensorIteratorConfig()
                  .add_owned_output(at::Tensor())
                  .add_const_input(grad_output)
                  .add_const_input(self)
                  .promote_inputs_to_common_dtype(true)
                  .cast_common_dtype_to_outputs(true)
                  .build();
  check_floating("exops::smooth_clamp_backward", iter.common_dtype());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, iter.common_dtype(),
                                  "exops::smooth_clamp_backward", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    const auto inv = opmath_t(1) / static_cast<opmath_t>(limit);
    detail::elementwise<scalar_t, 2>(iter, [inv](scalar_t g, scalar_t x) {
      const auto t = std::tanh(static_cast<opmath_t>(x) * inv);
      return static_cast<scalar_t>(static_cast<opmath_t>(g) * (opmath_t(1) - t * t));
    });
  });
  return iter.output();
}

}  // namespace exops
