// Elementwise loops over a built at::TensorIterator, shared by the exops kernels.
//
// TensorIterator broadcasts, promotes dtypes, allocates outputs, coalesces dimensions and splits
// the work across threads (at::parallel_for); these loops supply the per-thread 2-d loop, with a
// unit-stride inner path the compiler vectorizes and a strided path for everything else.
#pragma once

#include <ATen/TensorIterator.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace exops::detail {

template <typename scalar_t, typename F, std::size_t... I>
inline void contiguous_row(const std::array<char*, sizeof...(I) + 1>& ptrs, int64_t n, const F& f,
                           std::index_sequence<I...>) {
  auto* out = reinterpret_cast<scalar_t*>(ptrs[0]);
  const std::array<const scalar_t*, sizeof...(I)> in = {
      reinterpret_cast<const scalar_t*>(ptrs[I + 1])...};
  for (int64_t i = 0; i < n; ++i) {
    out[i] = f(in[I][i]...);
  }
}

template <typename scalar_t, typename F, std::size_t... I>
inline void strided_row(const std::array<char*, sizeof...(I) + 1>& ptrs, const int64_t* strides,
                        int64_t n, const F& f, std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<scalar_t*>(ptrs[0] + i * strides[0]) =
        f(*reinterpret_cast<const scalar_t*>(ptrs[I + 1] + i * strides[I + 1])...);
  }
}

// out = f(in_0, ..., in_{N-1}) for every element; `iter` has one output followed by N inputs,
// all of dtype scalar_t.
template <typename scalar_t, std::size_t N, typename F>
void elementwise(at::TensorIteratorBase& iter, const F& f) {
  TORCH_INTERNAL_ASSERT(iter.ntensors() == static_cast<int>(N + 1));
  iter.for_each([&f](char** base, const int64_t* strides, int64_t size0, int64_t size1) {
    // strides[0..N] step along the inner dimension, strides[N+1..2N+1] along the outer one.
    std::array<char*, N + 1> ptrs;
    bool contiguous = true;
    for (std::size_t k = 0; k <= N; ++k) {
      ptrs[k] = base[k];
      contiguous = contiguous && strides[k] == static_cast<int64_t>(sizeof(scalar_t));
    }
    for (int64_t j = 0; j < size1; ++j) {
      if (contiguous) {
        contiguous_row<scalar_t>(ptrs, size0, f, std::make_index_sequence<N>{});
      } else {
        strided_row<scalar_t>(ptrs, strides, size0, f, std::make_index_sequence<N>{});
      }
      for (std::size_t k = 0; k <= N; ++k) {
        ptrs[k] += strides[N + 1 + k];
      }
    }
  });
}

}  // namespace exops::detail
