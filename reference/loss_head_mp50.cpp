// The 50-digit instantiation, in its own translation unit so that the two compile in parallel.
#include "reference/loss_head_mp50.hpp"

namespace dflash {

DFLASH_LOSS_HEAD_INSTANTIATE(, Mp50)

}  // namespace dflash
