// The groups of rows `dflash verify` runs. Each part of the project contributes one function.
#pragma once

#include <vector>

#include "verify/verify_row.hpp"

namespace dflash {

std::vector<VerifyRow> verify_loss_head_rows();

}  // namespace dflash
