#include "distributed/cuda/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>

#include "distributed/cuda/rank_device.hpp"
#include "distributed/cuda/stream_wait.hpp"
#include "io/errors.hpp"

namespace dflash {

namespace {

void check_cuda(cudaError_t code, std::string_view call) {
  if (code != cudaSuccess) throw CommunicationError(str("CUDA ", call, " failed: ", cudaGetErrorString(code)));
}

void check_nccl(ncclResult_t code, std::string_view call, ncclComm_t comm = nullptr) {
  if (code == ncclSuccess) return;
  std::string detail = ncclGetErrorString(code);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') detail += str(" (", last, ")");
  }
  throw CommunicationError(str("NCCL ", call, " failed: ", detail));
}

ncclDataType_t nccl_type(CommType type) {
  switch (type) {
    case CommType::f32:
      return ncclFloat32;
    case CommType::f64:
      return ncclFloat64;
    case CommType::i64:
      return ncclInt64;
  }
  throw CommunicationError("NCCL: unknown element type");
}

ncclRedOp_t nccl_op(CommOp op) {
  switch (op) {
    case CommOp::sum:
      return ncclSum;
    case CommOp::max:
      return ncclMax;
    case CommOp::min:
      return ncclMin;
  }
  throw CommunicationError("NCCL: unknown reduction");
}

}  // namespace

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  double timeout_s = kDefaultNcclTimeoutS;  // DFLASH_NCCL_TIMEOUT_S, read once by the constructor

  // Waits for `call`'s collective on stream `on` (stream_wait.hpp): an asynchronous error of the
  // communicator (a peer or the network failed), or the stream still busy after timeout_s, aborts
  // it, which ends this rank's pending NCCL work, and throws CommunicationError naming the call;
  // the job then ends through the rank guard's abort.
  void wait(cudaStream_t on, std::string_view call) {
    dflash::wait_for_stream(
        [&] {
          const cudaError_t code = cudaStreamQuery(on);
          if (code == cudaErrorNotReady) return StreamPoll::busy;
          check_cuda(code, str("cudaStreamQuery after ", call));
          return StreamPoll::done;
        },
        [&]() -> std::optional<std::string> {
          ncclResult_t state = ncclSuccess;
          if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return std::string("ncclCommGetAsyncError failed");
          if (state == ncclSuccess || state == ncclInProgress) return std::nullopt;
          std::string detail = ncclGetErrorString(state);
          const char* last = ncclGetLastError(comm);
          if (last != nullptr && *last != '\0') detail += str(" (", last, ")");
          return detail;
        },
        [&](const std::string& error) {
          ncclCommAbort(comm);
          comm = nullptr;  // aborted: the destructor has nothing to destroy
          throw CommunicationError(str("NCCL ", call, " failed while in flight: ", error));
        },
        timeout_s, steady_seconds);
  }
};

NcclCommunicator::NcclCommunicator(MpiCommunicator& bootstrap)
    : state_(std::make_unique<State>()), bootstrap_(bootstrap), rank_(bootstrap.rank()), size_(bootstrap.size()) {
  state_->timeout_s = nccl_timeout_seconds(std::getenv(kNcclTimeoutVariable));  // bad: refused at once
  const int local = bootstrap.node_local_rank();
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const std::optional<int> device = rank_device(local, devices);
  if (!device) {
    throw CommunicationError(str("rank ", rank_, " is node-local rank ", local, " but sees ", devices,
                                 " GPU(s): launch at most one rank per GPU"));
  }
  device_ = *device;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  ncclUniqueId id{};
  if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  static_assert(sizeof(id) % 8 == 0, "the unique id travels as 64-bit words");
  bootstrap.broadcast(&id, sizeof(id) / 8, CommType::i64, 0);  // MPI moves the bytes unchanged
  // Every rank holds the id before any enters ncclCommInitRank, which blocks without calling MPI:
  // an MPI that progresses a broadcast only inside later MPI calls (HCOLL) would leave the root's
  // send unfinished while its peers wait in NCCL for it.
  std::int64_t all_have_it = 1;
  bootstrap.all_reduce(&all_have_it, &all_have_it, 1, CommType::i64, CommOp::min);
  check_cuda(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check_nccl(ncclCommInitRank(&state_->comm, size_, id, rank_), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  // ncclCommDestroy is a collective of the node's ranks: a rank whose stack unwinds from a failure
  // through this destructor (its guard ends the job next) would wait in it for peers that are
  // waiting for it in a collective, and the job would hang instead of ending. Left to the job's
  // end then. (Destroyed inside a catch block the exception is no longer uncaught: no code does.)
  if (std::uncaught_exceptions() > 0) return;
  if (state_->comm != nullptr) ncclCommDestroy(state_->comm);
  if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
}

void NcclCommunicator::all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) {
  check_nccl(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), state_->comm, state_->stream),
             "ncclAllReduce", state_->comm);
  state_->wait(state_->stream, "ncclAllReduce");
}

void NcclCommunicator::all_reduce_in_place_on_stream(void* buffer, std::size_t count, CommType type, CommOp op,
                                                     void* stream) {
  check_nccl(ncclAllReduce(buffer, buffer, count, nccl_type(type), nccl_op(op), state_->comm,
                           static_cast<cudaStream_t>(stream)),
             "ncclAllReduce (on the caller's stream)", state_->comm);
}

void NcclCommunicator::wait_for_stream(void* stream) {
  state_->wait(static_cast<cudaStream_t>(stream), "ncclAllReduce (on the caller's stream)");
}

double NcclCommunicator::wait_limit_seconds() const { return state_->timeout_s; }
void NcclCommunicator::set_wait_limit_seconds(double seconds) { state_->timeout_s = seconds; }

void NcclCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) {
  check_nccl(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), state_->comm, state_->stream),
             "ncclReduceScatter", state_->comm);
  state_->wait(state_->stream, "ncclReduceScatter");
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t count, CommType type) {
  check_nccl(ncclAllGather(send, recv, count, nccl_type(type), state_->comm, state_->stream), "ncclAllGather",
             state_->comm);
  state_->wait(state_->stream, "ncclAllGather");
}

void NcclCommunicator::broadcast(void* buffer, std::size_t count, CommType type, int root) {
  if (root < 0 || root >= size_)
    throw CommunicationError(str("ncclBroadcast: root ", root, " is not a rank of ", size_));
  check_nccl(ncclBroadcast(buffer, buffer, count, nccl_type(type), root, state_->comm, state_->stream), "ncclBroadcast",
             state_->comm);
  state_->wait(state_->stream, "ncclBroadcast");
}

void NcclCommunicator::end_job(int exit_code) {
  if (state_->comm != nullptr) ncclCommAbort(state_->comm);  // unblocks this rank's pending NCCL work
  bootstrap_.abort(exit_code);
}

}  // namespace dflash
