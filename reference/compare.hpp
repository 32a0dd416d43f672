// How results are compared (SPEC §10). Tensors: the largest absolute difference divided by the
// largest absolute reference value (a norm-wise relative error; an element-wise one is
// meaningless for entries near zero). Scalars: |a - b| / max(|b|, floor).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

#include "reference/tensor.hpp"

namespace dflash {

// Converts both sides to double only after subtracting in the wider of the two types.
// `floor`: the scale below which differences are rounding noise (0: none).
template <class A, class B>
double relative_error(std::span<const A> a, std::span<const B> b, double floor = 0) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double max_diff = 0, max_ref = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double ref = static_cast<double>(b[i]);
    const double diff = std::abs(static_cast<double>(B(a[i]) - b[i]));
    if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
    max_diff = std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::abs(ref));
  }
  max_ref = std::max(max_ref, floor);
  if (max_diff == 0) return 0;
  return max_ref == 0 ? std::numeric_limits<double>::infinity() : max_diff / max_ref;
}

template <class A, class B>
double scalar_relative_error(const A& a, const B& b, double floor = 0) {
  const double diff = std::abs(static_cast<double>(B(a) - b));
  if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
  if (diff == 0) return 0;
  const double denom = std::max(std::abs(static_cast<double>(b)), floor);
  return denom == 0 ? std::numeric_limits<double>::infinity() : diff / denom;
}

// Bitwise equality (where the arithmetic order is the same, SPEC §10 asks for identical bits,
// which == does not test: it equates 0 and -0).
template <class Real>
bool same_bits(const Real& x, const Real& y) {
  if constexpr (std::is_trivially_copyable_v<Real>)
    return std::memcmp(&x, &y, sizeof(Real)) == 0;
  else
    return x == y;
}

template <class Real>
bool same_bits(const Tensor<Real>& x, const Tensor<Real>& y) {
  if (x.shape() != y.shape()) return false;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    if (!same_bits(x[i], y[i])) return false;
  }
  return true;
}

}  // namespace dflash
