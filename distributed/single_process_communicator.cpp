#include "distributed/single_process_communicator.hpp"

#include <cstring>

#include "io/errors.hpp"

namespace dflash {

namespace {

// One rank: the result of any reduction is the input; in place is nothing to do.
void copy_unless_same(const void* send, void* recv, std::size_t count, CommType type) {
  if (send != recv) std::memmove(recv, send, count * comm_type_bytes(type));
}

}  // namespace

void SingleProcessCommunicator::all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp) {
  copy_unless_same(send, recv, count, type);
}

void SingleProcessCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp) {
  copy_unless_same(send, recv, count, type);
}

void SingleProcessCommunicator::all_gather(const void* send, void* recv, std::size_t count, CommType type) {
  copy_unless_same(send, recv, count, type);
}

void SingleProcessCommunicator::broadcast(void*, std::size_t, CommType, int root) {
  if (root != 0) throw CommunicationError(str("broadcast: root ", root, " is not a rank of a 1-rank communicator"));
}

void SingleProcessCommunicator::end_job(int) {}  // the only rank: Communicator::abort exits

}  // namespace dflash
