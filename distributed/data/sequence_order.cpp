#include "distributed/data/sequence_order.hpp"

#include <algorithm>
#include <numeric>

#include "common/philox.hpp"
#include "io/errors.hpp"

namespace dflash {

std::uint32_t data_order_key(std::uint64_t seed, std::int64_t sequence, std::int64_t epoch) {
  const Philox4x32 counter{
      {static_cast<std::uint32_t>(sequence), 0u, kDataOrderStream, static_cast<std::uint32_t>(epoch)}};
  return philox4x32_10(counter, philox_key_from_seed(seed)).v[0];
}

std::vector<std::int64_t> epoch_order(std::int64_t num_sequences, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::uint32_t> keys(static_cast<std::size_t>(num_sequences));
  for (std::int64_t i = 0; i < num_sequences; ++i) keys[std::size_t(i)] = data_order_key(seed, i, epoch);
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_sequences));
  std::iota(order.begin(), order.end(), std::int64_t(0));
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    const std::uint32_t ka = keys[std::size_t(a)], kb = keys[std::size_t(b)];
    return ka != kb ? ka < kb : a < b;
  });
  return order;
}

DataOrder::DataOrder(std::int64_t num_sequences, std::uint64_t seed) : n_(num_sequences), seed_(seed) {
  if (n_ < 1) throw_input_error("data set", "holds no sequences");
  if (n_ > std::int64_t(0xFFFFFFFF)) {
    throw_input_error("data set", str(n_, " sequences exceed the 2^32 the data order's counter word indexes"));
  }
}

const std::vector<std::int64_t>& DataOrder::order_of(std::int64_t epoch) {
  if (epoch != cached_epoch_) {
    if (epoch > std::int64_t(0xFFFFFFFF)) throw_input_error("data cursor", str("epoch ", epoch, " exceeds 2^32 - 1"));
    cached_ = epoch_order(n_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  return cached_;
}

std::vector<std::int64_t> DataOrder::batch(DataCursor& cursor, std::int64_t count) {
  if (cursor.epoch < 0 || cursor.position < 0 || cursor.position >= n_) {
    throw_input_error("data cursor", str("(epoch ", cursor.epoch, ", position ", cursor.position,
                                         ") is outside a set of ", n_, " sequences"));
  }
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  while (std::int64_t(out.size()) < count) {
    out.push_back(order_of(cursor.epoch)[std::size_t(cursor.position)]);
    if (++cursor.position == n_) {
      cursor.position = 0;
      ++cursor.epoch;
    }
  }
  return out;
}

}  // namespace dflash
