// bf16 tensors in the CUDA layers' host code: their raw bits (Bf16Bits) and the rounding of every
// upload of a double tensor, whose one home is reference/bf16_bits.hpp. The CUDA folders include
// this header: their layers reach the reference through cuda/runtime/ (CONTRIBUTING.md, Layers).
#pragma once

#include "reference/bf16_bits.hpp"
