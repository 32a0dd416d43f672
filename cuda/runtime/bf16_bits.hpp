// How bf16 tensors are typed in host code: their raw bits. Host code never does arithmetic on
// them; it rounds with common/bf16.hpp going in and widens to float coming out, exactly as the
// kernels do, so host and device agree bit for bit on what a bf16 value is.
#pragma once

#include <cstdint>

namespace dflash {

using Bf16Bits = std::uint16_t;

}  // namespace dflash
