// Shape-building kernels of exops: pad_end (SymInt[] sizes), gaussian_window (a factory taking
// dtype/layout/device/pin_memory), and scaled_smooth_clamp, a CompositeImplicitAutograd kernel
// built from other ops, so autograd differentiates it through them.
#include <exops/core/gaussian_window.h>
#include <exops/core/pad_end.h>
#include <exops/core/scaled_smooth_clamp.h>
#include <exops/core/smooth_clamp.h>  // ops::smooth_clamp

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <cmath>
#include <vector>

namespace exops {

at::Tensor pad_end_cpu(const at::Tensor& self, c10::SymIntArrayRef pad, double value) {
  TORCH_CHECK(self.device().is_cpu(), "exops::pad_end: expected self on the CPU, got ",
              self.device());
  // A CPU kernel runs on real tensors: every size is concrete here.
  const at::IntArrayRef pads = C10_AS_INTARRAYREF_SLOW(pad);
  const int64_t ndim = self.dim();
  const int64_t k = static_cast<int64_t>(pads.size());
  TORCH_CHECK(k <= ndim, "exops::pad_end: got ", k, " pad sizes for a ", ndim,
              "-dimensional tensor");
  std::vector<int64_t> sizes = self.sizes().vec();
  for (int64_t i = 0; i < k; ++i) {
    TORCH_CHECK(pads[i] >= 0, "exops::pad_end: pad sizes must be non-negative, got ", pads);
    sizes[ndim - k + i] += pads[i];
  }
  at::Tensor out = at::full(sizes, value, self.options());
  at::Tensor interior = out;
  for (int64_t d = ndim - k; d < ndim; ++d) {
    interior = interior.narrow(d, 0, self.size(d));
  }
  interior.copy_(self);
  return out;
}

at::Tensor gaussian_window(int64_t size, double sigma, std::optional<at::ScalarType> dtype,
                           std::optional<at::Layout> layout, std::optional<at::Device> device,
                           std::optional<bool> pin_memory) {
  TORCH_CHECK(size >= 0, "exops::gaussian_window: size must be non-negative, got ", size);
  TORCH_CHECK(sigma > 0, "exops::gaussian_window: sigma must be positive, got ", sigma);
  // Unlike TensorOptions, `Tensor::to` keeps the source dtype when none is given: resolve it.
  const auto options = at::TensorOptions()
                           .dtype(dtype.value_or(c10::typeMetaToScalarType(c10::get_default_dtype())))
                           .layout(layout)
                           .device(device);
  TORCH_CHECK(options.layout() == at::kStrided,
              "exops::gaussian_window: only the strided layout is supported, got ",
              options.layout());
  TORCH_CHECK(at::isFloatingType(options.dtype().toScalarType()),
              "exops::gaussian_window: expected a floating-point dtype, got ", options.dtype());
  // Computed on the CPU in double, then converted once to the requested dtype and device.
  at::Tensor w = at::empty({size}, at::TensorOptions().dtype(at::kDouble));
  double* p = w.data_ptr<double>();
  const double center = static_cast<double>(size - 1) / 2.0;
  double total = 0;
  for (int64_t i = 0; i < size; ++i) {
    const double z = (static_cast<double>(i) - center) / sigma;
    p[i] = std::exp(-0.5 * z * z);
    total += p[i];
  }
  for (int64_t i = 0; i < size; ++i) {
    p[i] /= total;
  }
  at::Tensor out = w.to(options);
  return pin_memory.value_or(false) ? out.pin_memory() : out;
}

at::Tensor scaled_smooth_clamp(const at::Tensor& self, const at::Tensor& scale, double limit) {
  return scale.mul(ops::smooth_clamp(self.div(scale), limit));
}

}  // namespace exops
