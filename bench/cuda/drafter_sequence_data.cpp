// The drafter step benchmark's synthetic sequence, on the host (bench/cuda/bench_data.hpp): the
// same anchors and block rows for the CUDA benchmark and, through ctypes, its PyTorch peer.
#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <vector>

#include "bench/cuda/bench_data.hpp"
#include "common/dropout_rng.hpp"
#include "io/errors.hpp"
#include "reference/anchors.hpp"

namespace {

// The token stream (bench_data.cu's device streams are 1-6 and 1024 + parameter index).
constexpr std::uint32_t kTokenStream = 7;

}  // namespace

extern "C" int dflash_bench_drafter_sequence(long long context, long long vocab, long long block_size,
                                             long long mask_token_id, long long max_anchors, double decay_gamma,
                                             unsigned long long data_seed, unsigned long long anchor_seed,
                                             std::int64_t* anchors, std::uint8_t* keep, std::int64_t* input_tokens,
                                             std::int64_t* positions, std::int64_t* labels, std::int64_t* teacher_rows,
                                             float* weights, std::uint8_t* valid, char* error, long long error_size) {
  using namespace dflash;
  try {
    if (context < 2 || vocab < 1 || block_size < 1) {
      throw_input_error("synthetic sequence", str("context ", context, ", vocab ", vocab, ", block_size ", block_size,
                                                  ": need context >= 2, vocab >= 1, block_size >= 1"));
    }
    const auto S = static_cast<std::size_t>(context);
    std::vector<std::int64_t> tokens(S);
    std::vector<std::uint8_t> loss_mask(S);
    for (std::size_t p = 0; p < S; ++p) {
      tokens[p] =
          static_cast<std::int64_t>(rng_word(data_seed, kTokenStream, 0, p) % static_cast<std::uint64_t>(vocab));
      loss_mask[p] = p >= S / 4 ? 1 : 0;
    }
    const AnchorSlots slots = sample_anchors(loss_mask, max_anchors, anchor_seed, 0, 0);
    const SequenceBlocks<double> rows =
        sequence_blocks<double>(tokens, loss_mask, slots, block_size, mask_token_id,
                                decay_gamma > 0 ? std::optional<double>(decay_gamma) : std::nullopt);
    std::copy(slots.anchors.begin(), slots.anchors.end(), anchors);
    std::copy(slots.keep.begin(), slots.keep.end(), keep);
    std::copy(rows.input_tokens.begin(), rows.input_tokens.end(), input_tokens);
    std::copy(rows.positions.begin(), rows.positions.end(), positions);
    std::copy(rows.labels.begin(), rows.labels.end(), labels);
    std::copy(rows.teacher_rows.begin(), rows.teacher_rows.end(), teacher_rows);
    std::transform(rows.weights.begin(), rows.weights.end(), weights, [](double w) { return static_cast<float>(w); });
    std::copy(rows.valid.begin(), rows.valid.end(), valid);
    return 0;
  } catch (const std::exception& e) {
    if (error_size > 0) {
      std::strncpy(error, e.what(), static_cast<std::size_t>(error_size - 1));
      error[error_size - 1] = '\0';
    }
    return 1;
  }
}
