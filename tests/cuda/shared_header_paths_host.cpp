#include "tests/cuda/shared_header_paths.hpp"

#define DFLASH_SHARED_HEADER_PATH shared_headers_via_host_compiler
#include "tests/cuda/shared_header_paths.inl"
