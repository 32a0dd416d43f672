// What speculative decoding would get from the drafter (TRAINING §17), per block position:
//   accuracy_by_position[k-1] = sum w01 [argmax z = y] / sum w01 at block position k = 1 .. B-1
//   acceptance_length = mean over kept blocks (kappa = 1) of 1 + the number of leading positions
//                       k = 1, 2, ... whose argmax equals the label, stopping at the first miss or
//                       the first row with w01 = 0.
// argmax ties go to the lowest index, as in the loss head's accuracy (SPEC §5).
//
// Both training steps hand back each sequence's rows with their loss head's own argmax hits
// (StepMetrics::sequence_hits: same anchors and dropout masks as the step, no second forward);
// evaluation adds those of its own dropout-free forward.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/drafter.hpp"

namespace dflash {

struct BlockStatistics {
  std::vector<double> correct;   // [B] by position k (k = 0 unused)
  std::vector<double> labelled;  // [B] sum w01 by k
  double accepted = 0;           // sum over kept blocks of the acceptance length
  double kept_blocks = 0;

  explicit BlockStatistics(std::int64_t block_size = 0)
      : correct(std::size_t(block_size), 0.0), labelled(std::size_t(block_size), 0.0) {}
  // The flat form a communicator sums: correct, labelled, accepted, kept_blocks.
  std::vector<double> packed() const;
  static BlockStatistics unpacked(const std::vector<double>& values, std::int64_t block_size);

  std::vector<double> accuracy_by_position() const;  // k = 1 .. B-1 (0 where nothing is labelled)
  double acceptance_length() const;                  // 0 when no block is kept
};

// Adds the blocks of one sequence from its rows (i = n B + k): keep flags [N], w01 and whether the
// drafter's argmax equals the label [N B] (read only where w01 = 1).
void add_block_hits(BlockStatistics& into, std::int64_t block_size, std::span<const std::uint8_t> keep,
                    std::span<const std::uint8_t> valid, std::span<const std::uint8_t> hits);

// The same from the labels and the drafter's argmax [N B].
void add_block_rows(BlockStatistics& into, std::int64_t block_size, std::span<const std::uint8_t> keep,
                    std::span<const std::uint8_t> valid, std::span<const std::int64_t> labels,
                    std::span<const std::int64_t> argmax);

// Adds the blocks of every sequence of a forward's outputs: its keep flags, w01 and the loss head's
// own hits (argmax z = y, lowest index on ties), which the forward already computed.
void add_block_statistics(BlockStatistics& into, std::int64_t block_size, const DrafterOutputs<double>& outputs);

}  // namespace dflash
