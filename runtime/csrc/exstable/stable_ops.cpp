// CPU kernels of exstable, written against torch's stable ABI only (torch/csrc/stable,
// torch/headeronly): the library loads on any torch >= the op file's min_torch.
#include <exstable/stable.h>

#include "checks.h"

#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

namespace exstable {

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

void check_floating(const char* op, const Tensor& t) {
  const ScalarType dtype = t.scalar_type();
  STD_TORCH_CHECK(dtype == ScalarType::Float || dtype == ScalarType::Double, op,
                  ": expected a float32 or float64 tensor");
  STD_TORCH_CHECK(t.is_cpu(), op, ": expected a CPU tensor");
}

// out[i] = in[i] * alpha over contiguous tensors of one floating dtype.
template <typename T>
void scale_loop(const Tensor& in, const Tensor& out, double alpha) {
  const T* src = static_cast<const T*>(in.const_data_ptr());
  T* dst = static_cast<T*>(out.mutable_data_ptr());
  const T a = static_cast<T>(alpha);
  const int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = src[i] * a;
  }
}

void scale_into(const Tensor& in, const Tensor& out, double alpha) {
  if (in.scalar_type() == ScalarType::Float) {
    scale_loop<float>(in, out, alpha);
  } else {
    scale_loop<double>(in, out, alpha);
  }
}

template <typename T>
void multiply_loop(const Tensor& a, const Tensor& b, const Tensor& out) {
  const T* x = static_cast<const T*>(a.const_data_ptr());
  const T* y = static_cast<const T*>(b.const_data_ptr());
  T* z = static_cast<T*>(out.mutable_data_ptr());
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) {
    z[i] = x[i] * y[i];
  }
}


}  // namespace

Tensor scale_cpu(const Tensor& self, double alpha) {
  check_floating("exstable::scale", self);
  Tensor in = torch::stable::contiguous(self);
  Tensor out = torch::stable::empty_like(in);
  scale_into(in, out, alpha);
  return out;
}

Tensor scale_cpu_(Tensor& self, double alpha) {
  check_floating("exstable::scale_", self);
  checks::into_strided(self, [&](const Tensor& dst) { scale_into(dst, dst, alpha); });
  return self;
}

Tensor scale_out_cpu(const Tensor& self, double alpha, Tensor& out) {
  check_floating("exstable::scale.out", self);
  checks::out_like(self, out);
  const Tensor in = torch::stable::contiguous(self);
  checks::into_strided(out, [&](const Tensor& dst) { scale_into(in, dst, alpha); });
  return out;
}

Tensor masked_sum_cpu(const Tensor& self,
                      std::optional<torch::headeronly::HeaderOnlyArrayRef<int64_t>> dim,
                      bool keepdim, const std::optional<Tensor>& mask) {
  check_floating("exstable::masked_sum", self);
  Tensor x = torch::stable::contiguous(self);
  if (mask.has_value()) {
    checks::mask_like(self, *mask);
    Tensor m = torch::stable::contiguous(*mask);
    Tensor prod = torch::stable::empty_like(x);
    if (x.scalar_type() == ScalarType::Float) {
      multiply_loop<float>(x, m, prod);
    } else {
      multiply_loop<double>(x, m, prod);
    }
    x = prod;
  }
  return torch::stable::sum(x, dim, keepdim, self.scalar_type());
}

}  // namespace exstable
