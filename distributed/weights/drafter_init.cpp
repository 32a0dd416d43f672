#include "distributed/weights/drafter_init.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "common/philox.hpp"

namespace dflash {

double initial_matrix_element(std::uint64_t seed, std::uint32_t matrix, std::uint64_t element) {
  const Philox4x32 counter{
      {static_cast<std::uint32_t>(element), static_cast<std::uint32_t>(element >> 32), kInitStream, matrix}};
  const Philox4x32 w = philox4x32_10(counter, philox_key_from_seed(seed));
  const double u1 = (double(w.v[0]) + 0.5) / 4294967296.0, u2 = (double(w.v[1]) + 0.5) / 4294967296.0;
  return kInitStandardDeviation * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void seeded_flat_values(const DrafterConfig& config, std::uint64_t seed, std::int64_t first, std::span<double> out) {
  if (first < 0) throw std::logic_error("seeded_flat_values: a negative first element");
  const std::int64_t end = first + std::int64_t(out.size());
  std::fill(out.begin(), out.end(), 0.0);
  std::int64_t offset = 0;  // the flat index of the tensor's first element
  std::uint32_t matrix = 0;
  for (const ParameterShape& s : drafter_parameter_shapes(config)) {
    const std::int64_t n = shape_numel(s.shape), lo = std::max(offset, first), hi = std::min(offset + n, end);
    for (std::int64_t e = lo; e < hi; ++e) {
      out[std::size_t(e - first)] =
          s.shape.size() == 1 ? 1.0 : initial_matrix_element(seed, matrix, std::uint64_t(e - offset));
    }
    if (s.shape.size() != 1) ++matrix;
    offset += n;
  }
}

DrafterParameters<double> seeded_drafter_parameters(MemoryTracker& tracker, const DrafterConfig& config,
                                                    std::uint64_t seed) {
  DrafterParameters<double> p = make_drafter_parameters<double>(tracker, config, MemoryCategory::parameters);
  std::int64_t offset = 0;
  p.for_each([&](const std::string&, Tensor<double>& t) {
    seeded_flat_values(config, seed, offset, std::span<double>(t.data(), std::size_t(t.numel())));
    offset += t.numel();
  });
  return p;
}

}  // namespace dflash
