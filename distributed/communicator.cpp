#include "distributed/communicator.hpp"

#include <cstdlib>

namespace dflash {

std::size_t comm_type_bytes(CommType type) {
  switch (type) {
    case CommType::f32: return 4;
    case CommType::f64: return 8;
    case CommType::i64: return 8;
  }
  return 0;
}

std::string_view comm_type_name(CommType type) {
  switch (type) {
    case CommType::f32: return "f32";
    case CommType::f64: return "f64";
    case CommType::i64: return "i64";
  }
  return "unknown";
}

void Communicator::abort(int exit_code) {
  end_job(exit_code);
  std::_Exit(exit_code);
}

}  // namespace dflash
