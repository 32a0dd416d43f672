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
  const std::vector<ParameterShape> shapes = drafter_parameter_shapes(config);
  std::vector<std::uint32_t> matrix(shapes.size());  // each matrix's p: its place among the matrices
  std::uint32_t matrices = 0;
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    matrix[t] = matrices;
    if (shapes[t].shape.size() != 1) ++matrices;
  }
  std::fill(out.begin(), out.end(), 0.0);
  for (const FlatRun& r : flat_runs(parameter_sizes(shapes), first, std::int64_t(out.size()))) {
    const bool norm = shapes[r.tensor].shape.size() == 1;
    for (std::int64_t i = 0; i < r.length; ++i) {
      out[std::size_t(r.position + i)] =
          norm ? 1.0 : initial_matrix_element(seed, matrix[r.tensor], std::uint64_t(r.at + i));
    }
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
