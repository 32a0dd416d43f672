#include "distributed/metrics/block_statistics.hpp"

namespace dflash {

std::vector<double> BlockStatistics::packed() const {
  std::vector<double> v = correct;
  v.insert(v.end(), labelled.begin(), labelled.end());
  v.push_back(accepted);
  v.push_back(kept_blocks);
  return v;
}

BlockStatistics BlockStatistics::unpacked(const std::vector<double>& v, std::int64_t block_size) {
  BlockStatistics s(block_size);
  const auto B = std::size_t(block_size);
  std::copy(v.begin(), v.begin() + B, s.correct.begin());
  std::copy(v.begin() + B, v.begin() + 2 * B, s.labelled.begin());
  s.accepted = v[2 * B];
  s.kept_blocks = v[2 * B + 1];
  return s;
}

std::vector<double> BlockStatistics::accuracy_by_position() const {
  std::vector<double> out;
  for (std::size_t k = 1; k < correct.size(); ++k) out.push_back(labelled[k] > 0 ? correct[k] / labelled[k] : 0.0);
  return out;
}

double BlockStatistics::acceptance_length() const { return kept_blocks > 0 ? accepted / kept_blocks : 0.0; }

void add_block_hits(BlockStatistics& into, std::int64_t B, std::span<const std::uint8_t> keep,
                    std::span<const std::uint8_t> valid, std::span<const std::uint8_t> hits) {
  for (std::size_t n = 0; n < keep.size(); ++n) {
    bool accepting = keep[n] == 1;
    double accepted = 1;
    for (std::int64_t k = 1; k < B; ++k) {
      const std::size_t i = n * std::size_t(B) + std::size_t(k);
      if (valid[i] == 0) {
        accepting = false;  // acceptance stops at the first row without a label
        continue;
      }
      const bool hit = hits[i] == 1;
      into.labelled[std::size_t(k)] += 1;
      into.correct[std::size_t(k)] += hit ? 1 : 0;
      accepting = accepting && hit;
      accepted += accepting ? 1 : 0;
    }
    if (keep[n] == 1) {
      into.accepted += accepted;
      into.kept_blocks += 1;
    }
  }
}

void add_block_rows(BlockStatistics& into, std::int64_t B, std::span<const std::uint8_t> keep,
                    std::span<const std::uint8_t> valid, std::span<const std::int64_t> labels,
                    std::span<const std::int64_t> argmax) {
  std::vector<std::uint8_t> hits(argmax.size(), 0);
  for (std::size_t i = 0; i < hits.size(); ++i) hits[i] = argmax[i] == labels[i] ? 1 : 0;
  add_block_hits(into, B, keep, valid, hits);
}

void add_block_statistics(BlockStatistics& into, std::int64_t block_size, const DrafterOutputs<double>& out) {
  const std::size_t nseq = std::size_t(out.keep.dim(0)), N = std::size_t(out.keep.dim(1));
  const std::size_t T = N * std::size_t(block_size);
  const std::span<const std::uint8_t> keep(out.keep.data(), nseq * N), labelled(out.labelled), hits(out.hits);
  for (std::size_t b = 0; b < nseq; ++b) {
    add_block_hits(into, block_size, keep.subspan(b * N, N), labelled.subspan(b * T, T), hits.subspan(b * T, T));
  }
}

}  // namespace dflash
