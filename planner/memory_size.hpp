// Device memory as people write it: "95GB" (decimal, 95·10⁹ B, the way GPU vendors quote it),
// "80GiB" (binary), or a plain byte count. Plans print GiB.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dflash {

// Throws InputError naming `argument`, e.g. "--gpu-memory: '95XB' is not a size (...)", for text
// that does not parse, a size that is not positive, a fraction of a byte, or more than 2⁶³ - 1 B.
std::int64_t parse_memory_size(std::string_view text, std::string_view argument);

double to_gib(std::int64_t bytes);

// "12.34" (two decimals, GiB).
std::string gib_string(std::int64_t bytes);

// "20.78 GB" (two decimals, 10^9 bytes, the unit named): disks and bus traffic, quoted in powers of 10.
std::string gb_string(std::uint64_t bytes);

}  // namespace dflash
