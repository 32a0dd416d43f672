// libFuzzer target for the safetensors reader: arbitrary bytes go to the in-memory reader; a file
// it accepts must then be fully usable (every tensor's bytes read, every float or integer tensor
// converted to double). The only acceptable failure is dflash::InputError; a crash, a sanitizer
// report, or any other exception is a finding. Built and run by `ci/fuzz safetensors`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "io/errors.hpp"
#include "io/safetensors.hpp"

namespace {

namespace st = dflash::safetensors;

// Reads every byte of the tensor so that ASan sees any out-of-bounds range.
unsigned checksum(const st::TensorData& tensor) {
  unsigned sum = 0;
  for (std::byte b : tensor.bytes) sum += static_cast<unsigned>(b);
  return sum;
}

void exercise(std::span<const std::byte> bytes) {
  const st::Reader reader = st::Reader::from_bytes(bytes, "fuzz-input");
  volatile unsigned sink = 0;
  for (const auto& [key, value] : reader.metadata()) sink = sink + static_cast<unsigned>(key.size() + value.size());
  for (const std::string& name : reader.names()) {
    const st::TensorData tensor = reader.tensor(name);
    if (tensor.bytes.size() != tensor.info.byte_size()) std::abort();  // the reader broke its contract
    sink = sink + checksum(tensor);
    try {
      const std::vector<double> values = st::to_doubles(tensor);
      if (values.size() != tensor.info.element_count()) std::abort();
      if (st::dtype_is_integer(tensor.info.dtype)) sink = sink + static_cast<unsigned>(st::to_int64s(tensor).size());
    } catch (const dflash::InputError&) {
      // Values that have no double (I64 beyond 2^53) or BOOL bytes other than 0/1: a clean refusal.
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    exercise(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size));
  } catch (const dflash::InputError&) {
    // Rejected input: the expected outcome for most bytes.
  }
  return 0;
}
