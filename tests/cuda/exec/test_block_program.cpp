// SharedCarver (cuda/exec/block_program.hpp): the one layout of a block's shared memory for the
// device and the host. Every region it hands out starts 16 bytes past the previous one's start at
// least, on a 16-byte boundary: the kernels read shared rows with 16-byte vector loads, which fault
// on the device at any smaller alignment while the host, copying bytes, never notices. So the
// alignment is asserted here, on the carver and on the layouts the programs build with it.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/attention/simt_program.hpp"
#include "cuda/exec/block_program.hpp"
#include "cuda/trunk/elementwise_program.hpp"

namespace dflash {
namespace {

constexpr std::size_t kVectorBytes = 16;  // one uint4 / float4 load or store

// A 16-byte-aligned buffer of `bytes` bytes (the dynamic shared memory of a block starts aligned).
struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t bytes) : storage(bytes + kVectorBytes) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
    base = storage.data() + (kVectorBytes - address % kVectorBytes) % kVectorBytes;
  }
  std::vector<unsigned char> storage;
  unsigned char* base;
};

std::size_t offset_of(const void* p, const unsigned char* base) {
  return static_cast<std::size_t>(static_cast<const unsigned char*>(p) - base);
}

TEST(SharedCarver, EveryRegionStartsOnA16ByteBoundaryAndNoneOverlap) {
  // Odd counts of 1-, 2-, 4- and 8-byte values: every take after the first starts off a boundary
  // unless the carver rounds up.
  const std::int64_t counts[] = {3, 1, 5, 7, 2, 9};
  SharedCarver measure(nullptr);
  for (std::int64_t c : counts) {
    measure.take<char>(c);
    measure.take<std::uint16_t>(c);
    measure.take<float>(c);
    measure.take<double>(c);
  }
  const std::size_t bytes = measure.bytes();
  EXPECT_EQ(bytes % kVectorBytes, 0u);

  AlignedBuffer buffer(bytes);
  SharedCarver mem(buffer.base);
  std::size_t end = 0;
  auto check = [&](const void* p, std::size_t region_bytes) {
    const std::size_t at = offset_of(p, buffer.base);
    EXPECT_EQ(at % kVectorBytes, 0u) << "region at byte " << at;
    EXPECT_GE(at, end) << "region at byte " << at << " overlaps the previous one, which ends at " << end;
    end = at + region_bytes;
    EXPECT_LE(end, bytes);
  };
  for (std::int64_t c : counts) {
    check(mem.take<char>(c), std::size_t(c));
    check(mem.take<std::uint16_t>(c), 2 * std::size_t(c));
    check(mem.take<float>(c), 4 * std::size_t(c));
    check(mem.take<double>(c), 8 * std::size_t(c));
  }
  EXPECT_EQ(mem.bytes(), bytes) << "measuring with a null base and carving a real one must agree";
}

TEST(SharedCarver, NullBaseMeasuresWithoutPointers) {
  SharedCarver mem(nullptr);
  EXPECT_EQ(mem.take<float>(5), nullptr);
  EXPECT_EQ(mem.bytes(), 32u);  // 20 bytes, rounded up to the next 16
}

// The layouts the programs carve, at shapes whose rows and counts are not multiples of 16 bytes.
template <class Layout, class... Pointers>
void expect_aligned_layout(std::size_t bytes, const Layout& layout, const unsigned char* base, Pointers... members) {
  (void)layout;
  for (const void* p : {static_cast<const void*>(members)...}) {
    const std::size_t at = offset_of(p, base);
    EXPECT_EQ(at % kVectorBytes, 0u) << "member at byte " << at;
    EXPECT_LT(at, bytes);
  }
}

TEST(SharedCarver, ProgramLayoutsAre16ByteAligned) {
  AttentionTiling tl;
  tl.S = 37;
  tl.N = 3;
  tl.B = 5;
  tl.nh = 6;
  tl.nkv = 2;
  tl.d = 6;  // bf16 rows of 3 words (12 bytes); R = 15 rows: q is 180 bytes, so only rounding aligns k
  tl.key_tile = 7;
  ASSERT_EQ(attention_tiling_problem(tl), nullptr);

  {
    using Layout = AttentionForwardShared<std::uint16_t>;
    const std::size_t bytes = attention_forward_shared_bytes<std::uint16_t>(tl);
    AlignedBuffer buffer(bytes);
    SharedCarver mem(buffer.base);
    const Layout sm(mem, tl);
    expect_aligned_layout(bytes, sm, buffer.base, sm.q, sm.k, sm.v, sm.p, sm.acc, sm.row_max, sm.row_sum, sm.rescale);
  }
  {
    using Layout = AttentionDkvShared<std::uint16_t>;
    const std::size_t bytes = attention_dkv_shared_bytes<std::uint16_t>(tl);
    AlignedBuffer buffer(bytes);
    SharedCarver mem(buffer.base);
    const Layout sm(mem, tl);
    expect_aligned_layout(bytes, sm, buffer.base, sm.tile.q, sm.tile.d_out, sm.tile.k, sm.tile.v, sm.tile.lse,
                          sm.tile.delta, sm.tile.fp, sm.tile.ds, sm.dk, sm.dv);
  }
  {
    const int threads = 37;
    const std::size_t bytes = rms_norm_row_shared_bytes(threads);
    AlignedBuffer buffer(bytes);
    SharedCarver mem(buffer.base);
    const RmsNormRowShared sm(mem, threads);
    expect_aligned_layout(bytes, sm, buffer.base, sm.partial, sm.scalar);
  }
}

}  // namespace
}  // namespace dflash
