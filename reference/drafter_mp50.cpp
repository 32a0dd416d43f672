// The 50-digit instantiation, in its own translation unit so that the two compile in parallel.
#include "reference/drafter_mp50.hpp"

namespace dflash {

DFLASH_DRAFTER_INSTANTIATE(, Mp50)

}  // namespace dflash
