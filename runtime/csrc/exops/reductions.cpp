// Reducing and selecting CPU kernels of exops: weighted_mse, moments (one-pass Welford),
// weighted_sum and select_above (data-dependent output length).
#include <exops/core/weighted_mse.h>
#include <exops/core/moments.h>
#include <exops/core/weighted_sum.h>
#include <exops/core/select_above.h>

#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "elementwise.h"

namespace exops {

namespace {

void check_cpu(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), op, ": expected ", name, " on the CPU, got ", t.device());
}

enum class Reduction { None, Mean, Sum };

Reduction parse_reduction(c10::string_view reduction) {
  if (reduction == "none") return Reduction::None;
  if (reduction == "mean") return Reduction::Mean;
  if (reduction == "sum") return Reduction::Sum;
  TORCH_CHECK(false, "exops::weighted_mse: reduction must be 'none', 'mean' or 'sum', got '",
              std::string(reduction), "'");
}

// Welford's running mean and sum of squared deviations, mergeable across chunks (Chan et al.).
struct Welford {
  double mean = 0;
  double m2 = 0;
  int64_t n = 0;

  template <typename scalar_t>
  void add_all(const scalar_t* p, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      const double v = static_cast<double>(p[i]);
      ++n;
      const double delta = v - mean;
      mean += delta / static_cast<double>(n);
      m2 += delta * (v - mean);
    }
  }

  static Welford merge(const Welford& a, const Welford& b) {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    Welford r;
    r.n = a.n + b.n;
    const double delta = b.mean - a.mean;
    const double nb_over_n = static_cast<double>(b.n) / static_cast<double>(r.n);
    r.mean = a.mean + delta * nb_over_n;
    r.m2 = a.m2 + b.m2 + delta * delta * static_cast<double>(a.n) * nb_over_n;
    return r;
  }
};

}  // namespace

at::Tensor weighted_mse_cpu(const at::Tensor& input, const at::Tensor& target,
                            const std::optional<at::Tensor>& weight, c10::string_view reduction) {
  const Reduction r = parse_reduction(reduction);
  const bool weighted = weight.has_value() && weight->defined();
  check_cpu("exops::weighted_mse", input, "input");
  check_cpu("exops::weighted_mse", target, "target");
  at::TensorIteratorConfig config;
  config.add_owned_output(at::Tensor()).add_const_input(input).add_const_input(target);
  if (weighted) {
    check_cpu("exops::weighted_mse", *weight, "weight");
    config.add_const_input(*weight);
  }
  auto iter = config.promote_inputs_to_common_dtype(true).cast_common_dtype_to_outputs(true).build();
  TORCH_CHECK(at::isFloatingType(iter.common_dtype()),
              "exops::weighted_mse: expected floating-point tensors, got ", iter.common_dtype());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, iter.common_dtype(),
                                  "exops::weighted_mse", [&] {
    using opmath_t = at::opmath_type<scalar_t>;
    if (weighted) {
      detail::elementwise<scalar_t, 3>(iter, [](scalar_t x, scalar_t y, scalar_t w) {
        const auto d = static_cast<opmath_t>(x) - static_cast<opmath_t>(y);
        return static_cast<scalar_t>(static_cast<opmath_t>(w) * d * d);
      });
    } else {
      detail::elementwise<scalar_t, 2>(iter, [](scalar_t x, scalar_t y) {
        const auto d = static_cast<opmath_t>(x) - static_cast<opmath_t>(y);
        return static_cast<scalar_t>(d * d);
      });
    }
  });
  const at::Tensor& loss = iter.output();
  switch (r) {
    case Reduction::None:
      return loss;
    case Reduction::Mean:
      return loss.mean();
    case Reduction::Sum:
      return loss.sum();
  }
  TORCH_INTERNAL_ASSERT(false, "unhandled reduction");
}

std::tuple<at::Tensor, at::Tensor> moments_cpu(const at::Tensor& self, at::IntArrayRef dim,
                                               bool keepdim, int64_t correction) {
  check_cpu("exops::moments", self, "self");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "exops::moments: expected a floating-point tensor, got ", self.scalar_type());
  const int64_t ndim = self.dim();
  std::vector<bool> reduced(static_cast<size_t>(ndim), dim.empty());
  for (const int64_t d : dim) {
    const int64_t w = at::maybe_wrap_dim(d, ndim);
    TORCH_CHECK(!reduced[w], "exops::moments: dim ", d, " appears more than once");
    reduced[w] = true;
  }
  // Kept dimensions first, reduced ones last: each output element reduces one contiguous row.
  std::vector<int64_t> perm, out_sizes;
  int64_t rows = 1, row_len = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    if (!reduced[d]) {
      perm.push_back(d);
      out_sizes.push_back(self.size(d));
      rows *= self.size(d);
    } else if (keepdim) {
      out_sizes.push_back(1);
    }
  }
  for (int64_t d = 0; d < ndim; ++d) {
    if (reduced[d]) {
      perm.push_back(d);
      row_len *= self.size(d);
    }
  }
  const at::Tensor x = self.permute(perm).contiguous();
  at::Tensor mean = at::empty({rows}, self.options());
  at::Tensor var = at::empty({rows}, self.options());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double denom = std::max<double>(0.0, static_cast<double>(row_len - correction));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "exops::moments",
                                  [&] {
    const scalar_t* src = x.const_data_ptr<scalar_t>();
    scalar_t* mean_out = mean.data_ptr<scalar_t>();
    scalar_t* var_out = var.data_ptr<scalar_t>();
    auto finish = [&](int64_t row, const Welford& w) {
      mean_out[row] = static_cast<scalar_t>(w.n > 0 ? w.mean : nan);
      var_out[row] = static_cast<scalar_t>(w.m2 / denom);
    };
    if (rows >= at::get_num_threads() || row_len < at::internal::GRAIN_SIZE) {
      // Enough rows to keep every thread busy: one row per task.
      const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(row_len, 1));
      at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          Welford w;
          w.add_all(src + row * row_len, row_len);
          finish(row, w);
        }
      });
    } else {
      // Few long rows: split each row across threads and merge the partial results.
      for (int64_t row = 0; row < rows; ++row) {
        const scalar_t* p = src + row * row_len;
        const Welford w = at::parallel_reduce(
            0, row_len, at::internal::GRAIN_SIZE, Welford{},
            [p](int64_t begin, int64_t end, Welford acc) {
              Welford part;
              part.add_all(p + begin, end - begin);
              return Welford::merge(acc, part);
            },
            Welford::merge);
        finish(row, w);
      }
    }
  });
  return std::make_tuple(mean.view(out_sizes), var.view(out_sizes));
}

at::Tensor weighted_sum_cpu(at::TensorList tensors, at::ArrayRef<double> weights) {
  TORCH_CHECK(!tensors.empty(), "exops::weighted_sum: expected at least one tensor");
  TORCH_CHECK(tensors.size() == weights.size(), "exops::weighted_sum: got ", tensors.size(),
              " tensors but ", weights.size(), " weights");
  at::ScalarType dtype = tensors[0].scalar_type();
  std::vector<int64_t> shape = tensors[0].sizes().vec();
  for (const at::Tensor& t : tensors) {
    check_cpu("exops::weighted_sum", t, "every tensor");
    dtype = at::promote_types(dtype, t.scalar_type());
    shape = at::infer_size(shape, t.sizes());
  }
  if (!at::isFloatingType(dtype) && !at::isComplexType(dtype)) {
    dtype = c10::typeMetaToScalarType(c10::get_default_dtype());
  }
  at::Tensor out = at::zeros(shape, tensors[0].options().dtype(dtype));
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.add_(tensors[i], weights[i]);   // vectorized, threaded, broadcasting
  }
  return out;
}

at::Tensor select_above_cpu(const at::Tensor& self, double threshold) {
  check_cpu("exops::select_above", self, "self");
  const at::Tensor x = self.contiguous();
  const int64_t n = x.numel();
  // Two passes over fixed chunks: count per chunk (in parallel), prefix-sum the counts into
  // output offsets, then copy per chunk (in parallel). Order is preserved.
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> offsets(static_cast<size_t>(chunks) + 1, 0);
  at::Tensor out;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "exops::select_above", [&] {
    const scalar_t* src = x.const_data_ptr<scalar_t>();
    auto above = [threshold](scalar_t v) {
      return std::abs(static_cast<double>(v)) > threshold;
    };
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t stop = std::min(n, (c + 1) * kChunk);
        int64_t count = 0;
        for (int64_t i = c * kChunk; i < stop; ++i) {
          count += above(src[i]);
        }
        offsets[c + 1] = count;
      }
    });
    std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
    out = at::empty({offsets.back()}, x.options());
    scalar_t* dst = out.data_ptr<scalar_t>();
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t stop = std::min(n, (c + 1) * kChunk);
        int64_t o = offsets[c];
        for (int64_t i = c * kChunk; i < stop; ++i) {
          if (above(src[i])) {
            dst[o++] = src[i];
          }
        }
      }
    });
  });
  return out;
}

}  // namespace exops
