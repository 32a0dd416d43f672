#include "reference/loss_head.hpp"

namespace dflash {

DFLASH_LOSS_HEAD_INSTANTIATE(, double)

}  // namespace dflash
