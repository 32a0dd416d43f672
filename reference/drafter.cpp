#include "reference/drafter.hpp"

namespace dflash {

DFLASH_DRAFTER_INSTANTIATE(, double)

}  // namespace dflash
