// A random drafter batch built from a seed: the data the tests, properties, verify rows and
// benchmarks run on. Numbers are drawn in double and converted, so the double and the 50-digit
// problems hold exactly the same values (convert_* below).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/counter_rng.hpp"
#include "reference/drafter_batch.hpp"
#include "reference/drafter_parameters.hpp"

namespace dflash {

struct DrafterBatchSpec {
  std::int64_t sequences = 2;
  std::int64_t context_length = 12;  // S
  std::uint64_t seed = 1;
  double mask_hole_fraction = 0.2;    // loss-mask entries that are 0
  double feature_scale = 1.0;         // target features uniform in +-feature_scale
  double teacher_scale = 1.0;         // teacher hidden rows uniform in +-teacher_scale
  bool explicit_anchors = false;      // false: anchors sampled by SPEC §4 in the step
  std::int64_t anchor_slots = 0;      // N of explicit anchors (0: the config's max_anchors)
  double invalid_block_fraction = 0;  // explicit anchors: slots with kappa = 0, anywhere in the list
};

template <class Real>
DrafterBatch<Real> make_drafter_batch(MemoryTracker& tracker, const DrafterConfig& config,
                                      const DrafterBatchSpec& spec) {
  const std::int64_t nseq = spec.sequences, S = spec.context_length, H = config.hidden_size;
  const std::int64_t KH = config.feature_width();
  CounterRng rng(spec.seed, 0xBA7C);
  DrafterBatch<Real> batch{Tensor<std::int64_t>(tracker, MemoryCategory::inputs, {nseq, S}),
                           Tensor<std::uint8_t>(tracker, MemoryCategory::inputs, {nseq, S}),
                           Tensor<Real>(tracker, MemoryCategory::inputs, {nseq, S, KH}),
                           Tensor<Real>(tracker, MemoryCategory::inputs, {nseq, S, H}),
                           std::nullopt,
                           std::nullopt};
  // Text never contains the mask token (with V = 1 it is the only token there is).
  for (std::int64_t e = 0; e < nseq * S; ++e) {
    const std::int64_t t = config.vocab_size > 1 ? rng.below(config.vocab_size - 1) : 0;
    batch.tokens[e] = config.vocab_size > 1 && t >= config.mask_token_id ? t + 1 : t;
  }
  for (std::int64_t e = 0; e < nseq * S; ++e) batch.loss_mask[e] = rng.bernoulli(spec.mask_hole_fraction) ? 0 : 1;
  for (std::int64_t e = 0; e < nseq * S * KH; ++e)
    batch.target_features[e] = Real(spec.feature_scale * rng.uniform(-1, 1));
  for (std::int64_t e = 0; e < nseq * S * H; ++e)
    batch.teacher_hidden[e] = Real(spec.teacher_scale * rng.uniform(-1, 1));

  if (spec.explicit_anchors) {
    const std::int64_t N = spec.anchor_slots > 0 ? spec.anchor_slots : config.max_anchors;
    batch.anchors.emplace(tracker, MemoryCategory::inputs, Shape{nseq, N});
    batch.keep.emplace(tracker, MemoryCategory::inputs, Shape{nseq, N});
    for (std::int64_t b = 0; b < nseq; ++b) {
      std::vector<std::uint8_t> keep(static_cast<std::size_t>(N));
      for (auto& k : keep) k = rng.bernoulli(spec.invalid_block_fraction) ? 0 : 1;
      // Distinct positions for the kept slots: a partial shuffle of [0, S), then sorted.
      std::vector<std::int64_t> positions(static_cast<std::size_t>(S));
      for (std::int64_t p = 0; p < S; ++p) positions[p] = p;
      const auto wanted = std::min<std::int64_t>(std::count(keep.begin(), keep.end(), 1), S);
      for (std::int64_t p = 0; p < wanted; ++p) std::swap(positions[p], positions[p + rng.below(S - p)]);
      std::sort(positions.begin(), positions.begin() + wanted);
      std::int64_t next = 0;
      for (std::int64_t n = 0; n < N; ++n) {
        if (keep[n] == 1 && next < wanted) {
          batch.anchors->row(b)[n] = positions[next++];
          batch.keep->row(b)[n] = 1;
        } else {
          batch.anchors->row(b)[n] = rng.below(S);
          batch.keep->row(b)[n] = 0;
        }
      }
    }
  }
  return batch;
}

// NaN in every teacher row that no valid block row of the given anchors reads.
template <class Real>
void poison_unused_teacher_rows(DrafterBatch<Real>& batch, const Tensor<std::int64_t>& anchors,
                                const Tensor<std::uint8_t>& keep, const DrafterConfig& config) {
  const std::int64_t S = batch.context_length(), H = config.hidden_size;
  for (std::int64_t b = 0; b < batch.num_sequences(); ++b) {
    const auto N = static_cast<std::size_t>(anchors.dim(1));
    const AnchorSlots slots{std::vector<std::int64_t>(anchors.row(b), anchors.row(b) + N),
                            std::vector<std::uint8_t>(keep.row(b), keep.row(b) + N)};
    const SequenceBlocks<Real> blocks =
        sequence_blocks<Real>(batch.sequence_tokens(b), batch.sequence_loss_mask(b), slots, config.block_size,
                              config.mask_token_id, config.loss_decay_gamma);
    std::vector<bool> used(static_cast<std::size_t>(S), false);
    for (std::size_t i = 0; i < blocks.valid.size(); ++i) {
      if (blocks.valid[i]) used[static_cast<std::size_t>(blocks.teacher_rows[i])] = true;
    }
    for (std::int64_t p = 0; p < S; ++p) {
      if (used[static_cast<std::size_t>(p)]) continue;
      for (std::int64_t c = 0; c < H; ++c) {
        batch.teacher_hidden[(b * S + p) * H + c] = Real(std::numeric_limits<double>::quiet_NaN());
      }
    }
  }
}

// The same values in another scalar type (exact: double converts exactly to wider types).
template <class To, class From>
Tensor<To> convert_tensor(MemoryTracker& tracker, const Tensor<From>& t) {
  Tensor<To> out(tracker, t.category(), t.shape());
  for (std::int64_t i = 0; i < t.numel(); ++i) out[i] = To(t[i]);
  return out;
}

template <class T>
Tensor<T> copy_tensor(MemoryTracker& tracker, const Tensor<T>& t) {
  return convert_tensor<T>(tracker, t);
}

template <class To, class From>
DrafterBatch<To> convert_batch(MemoryTracker& tracker, const DrafterBatch<From>& b) {
  DrafterBatch<To> out{copy_tensor(tracker, b.tokens),
                       copy_tensor(tracker, b.loss_mask),
                       convert_tensor<To>(tracker, b.target_features),
                       convert_tensor<To>(tracker, b.teacher_hidden),
                       std::nullopt,
                       std::nullopt};
  if (b.anchors) out.anchors.emplace(copy_tensor(tracker, *b.anchors));
  if (b.keep) out.keep.emplace(copy_tensor(tracker, *b.keep));
  return out;
}

template <class To, class From>
DrafterParameters<To> convert_parameters(MemoryTracker& tracker, const DrafterParameters<From>& p) {
  DrafterParameters<To> out;
  out.layers.resize(p.layers.size());
  std::vector<const Tensor<From>*> sources;
  p.for_each([&](const std::string&, const Tensor<From>& t) { sources.push_back(&t); });
  std::size_t index = 0;
  out.for_each([&](const std::string&, Tensor<To>& t) { t = convert_tensor<To>(tracker, *sources[index++]); });
  return out;
}

template <class To, class From>
FrozenWeights<To> convert_frozen(MemoryTracker& tracker, const FrozenWeights<From>& f) {
  return FrozenWeights<To>{convert_tensor<To>(tracker, f.embed_tokens), convert_tensor<To>(tracker, f.lm_head)};
}

}  // namespace dflash
