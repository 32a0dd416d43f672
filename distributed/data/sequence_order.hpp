// The order in which a run visits its data (TRAINING §14), and the cursor saved in checkpoints.
//
// Epochs count from 0. Epoch e visits every sequence i of the set once, in ascending order of
//   key_e(i) = word 0 of Philox(counter = (i, 0, 0xFFFFF, e), key = (lo32(seed), hi32(seed)))
// ties broken by i. Stream 0xFFFFF is stream(seq 0xFF, layer 0xFF, site 15): no other draw of the
// project uses site 15. The cursor (epoch, position) is where the next global batch starts; a
// batch that runs past the end of an epoch continues at position 0 of the next one.
#pragma once

#include <cstdint>
#include <vector>

namespace dflash {

inline constexpr std::uint32_t kDataOrderStream = 0xFFFFFu;

struct DataCursor {
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // in the epoch's order
  bool operator==(const DataCursor&) const = default;
};

// key_e(i) above.
std::uint32_t data_order_key(std::uint64_t seed, std::int64_t sequence, std::int64_t epoch);

// The sequences of epoch e in visiting order: a permutation of [0, n).
std::vector<std::int64_t> epoch_order(std::int64_t num_sequences, std::uint64_t seed, std::int64_t epoch);

class DataOrder {
 public:
  // Throws dflash::InputError when the set is empty or too large for the 32-bit counter word.
  DataOrder(std::int64_t num_sequences, std::uint64_t seed);

  std::int64_t num_sequences() const { return n_; }

  // The `count` sequence indices of the global batch starting at `cursor` (g = 0 .. count-1 in
  // order), and the cursor after it.
  std::vector<std::int64_t> batch(DataCursor& cursor, std::int64_t count);

 private:
  const std::vector<std::int64_t>& order_of(std::int64_t epoch);

  std::int64_t n_;
  std::uint64_t seed_;
  std::int64_t cached_epoch_ = -1;  // one epoch's order kept: a batch touches at most two in a row
  std::vector<std::int64_t> cached_;
};

}  // namespace dflash
