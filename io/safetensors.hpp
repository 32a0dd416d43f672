// The safetensors library in one include: dtypes, tensors, the validating reader and the
// deterministic writer. Everything lives in namespace dflash::safetensors.
#pragma once

#include "io/safetensors_dtype.hpp"
#include "io/safetensors_header.hpp"
#include "io/safetensors_reader.hpp"
#include "io/safetensors_tensor.hpp"
#include "io/safetensors_writer.hpp"
