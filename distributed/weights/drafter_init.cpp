#include "distributed/weights/drafter_init.hpp"

#include <cmath>
#include <numbers>

#include "common/philox.hpp"

namespace dflash {

double initial_matrix_element(std::uint64_t seed, std::uint32_t matrix, std::uint64_t element) {
  const Philox4x32 counter{
      {static_cast<std::uint32_t>(element), static_cast<std::uint32_t>(element >> 32), kInitStream, matrix}};
  const Philox4x32 w = philox4x32_10(counter, philox_key_from_seed(seed));
  const double u1 = (double(w.v[0]) + 0.5) / 4294967296.0, u2 = (double(w.v[1]) + 0.5) / 4294967296.0;
  return kInitStandardDeviation * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

DrafterParameters<double> seeded_drafter_parameters(MemoryTracker& tracker, const DrafterConfig& config,
                                                    std::uint64_t seed) {
  DrafterParameters<double> p = make_drafter_parameters<double>(tracker, config, MemoryCategory::parameters);
  std::uint32_t matrix = 0;
  p.for_each([&](const std::string&, Tensor<double>& t) {
    if (t.rank() == 1) {
      for (std::int64_t i = 0; i < t.numel(); ++i) t[i] = 1.0;
      return;
    }
    for (std::int64_t e = 0; e < t.numel(); ++e) t[e] = initial_matrix_element(seed, matrix, std::uint64_t(e));
    ++matrix;
  });
  return p;
}

}  // namespace dflash
