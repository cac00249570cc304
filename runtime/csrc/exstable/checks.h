// Argument checks the CPU and CUDA kernels of exstable share (stable ABI only).
#pragma once

#include <torch/csrc/stable/ops.h>
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

inline void out_like(const Tensor& self, const Tensor& out) {
  STD_TORCH_CHECK(same_sizes(self, out) && out.scalar_type() == self.scalar_type(),
                  "exstable::scale.out: out must have self's shape and dtype");
}

// Runs `write(dst)`, a loop over contiguous memory, so that it lands in `t`: straight into `t`
// when it is contiguous, else into a contiguous copy that is then copied back. A written
// argument may be any strided view (a transpose, a slice that vmap's fallback passes), and a
// write has to reach the caller's tensor.
template <typename Write>
void into_strided(Tensor& t, Write write) {
  if (t.is_contiguous()) {
    write(t);
    return;
  }
  Tensor dense = torch::stable::contiguous(t);
  write(dense);
  torch::stable::copy_(t, dense);
}

inline void mask_like(const Tensor& self, const Tensor& mask) {
  STD_TORCH_CHECK(same_sizes(self, mask) && mask.scalar_type() == self.scalar_type(),
                  "exstable::masked_sum: mask must have self's shape and dtype");
}

}  // namespace exstable::checks
