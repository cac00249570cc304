// Argument checks the CPU and CUDA kernels of exstable share (stable ABI only).
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

namespace exstable::checks {

using torch::stable::Tensor;

inline bool same_sizes(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) {
    return false;
  }
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) != b.size(d)) {
      return false;
    }
  }
  return true;
}

// scale.out writes its result straight into `out`.
inline void out_like(const Tensor& self, const Tensor& out) {
  STD_TORCH_CHECK(same_sizes(self, out) && out.scalar_type() == self.scalar_type() &&
                      out.is_contiguous(),
                  "exstable::scale.out: out must be contiguous, of self's shape and dtype");
}

inline void mask_like(const Tensor& self, const Tensor& mask) {
  STD_TORCH_CHECK(same_sizes(self, mask) && mask.scalar_type() == self.scalar_type(),
                  "exstable::masked_sum: mask must have self's shape and dtype");
}

}  // namespace exstable::checks
