// The drafter step in 50 significant digits (reference/scalar.hpp's Mp50): declared here, compiled
// once in drafter_mp50.cpp. Kept out of drafter.hpp so that only the code that checks double
// against near-exact maths parses Boost.Multiprecision (about 2.5 s of every translation unit).
#pragma once

#include "reference/drafter.hpp"
#include "reference/loss_head_mp50.hpp"
#include "reference/scalar.hpp"

namespace dflash {

DFLASH_DRAFTER_INSTANTIATE(extern, Mp50)

}  // namespace dflash
