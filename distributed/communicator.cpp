#include "distributed/communicator.hpp"

#include <cstdlib>
#include <string>

namespace dflash {

std::size_t comm_type_bytes(CommType type) {
  switch (type) {
    case CommType::f32:
      return 4;
    case CommType::f64:
      return 8;
    case CommType::i64:
      return 8;
  }
  return 0;
}

std::string_view comm_type_name(CommType type) {
  switch (type) {
    case CommType::f32:
      return "f32";
    case CommType::f64:
      return "f64";
    case CommType::i64:
      return "i64";
  }
  return "unknown";
}

void Communicator::all_reduce_in_place_on_stream(void*, std::size_t, CommType, CommOp, void*) {
  throw CommunicationError(std::string("all_reduce_in_place_on_stream: the ") + std::string(backend()) +
                           " communicator moves host memory; device buffers on a stream need NCCL (or one rank)");
}

void Communicator::wait_for_stream(void*) {}

void Communicator::abort(int exit_code) {
  end_job(exit_code);
  std::_Exit(exit_code);
}

}  // namespace dflash
