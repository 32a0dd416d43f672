// The safetensors library in one include: dtypes, tensors, the validating reader and the
// deterministic writer. Everything lives in namespace dflash::safetensors.
#pragma once

#include "golden/safetensors_dtype.hpp"
#include "golden/safetensors_header.hpp"
#include "golden/safetensors_reader.hpp"
#include "golden/safetensors_tensor.hpp"
#include "golden/safetensors_writer.hpp"
