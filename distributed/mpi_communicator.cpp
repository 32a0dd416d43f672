#include "distributed/mpi_communicator.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

#include <mpi.h>

#include "distributed/collective_wait.hpp"
#include "distributed/rank_guard.hpp"
#include "distributed/single_process_communicator.hpp"
#include "io/errors.hpp"

namespace dflash {

namespace {

std::string mpi_message(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str("MPI error code ", code);
  return std::string(text, static_cast<std::size_t>(length));
}

// Every MPI call goes through this: a failure becomes an exception naming the call.
void check(int code, std::string_view call) {
  if (code != MPI_SUCCESS) throw CommunicationError(str("MPI ", call, " failed: ", mpi_message(code)));
}

MPI_Datatype mpi_type(CommType type) {
  switch (type) {
    case CommType::f32:
      return MPI_FLOAT;
    case CommType::f64:
      return MPI_DOUBLE;
    case CommType::i64:
      return MPI_INT64_T;
  }
  throw CommunicationError("MPI: unknown element type");
}

MPI_Op mpi_op(CommOp op) {
  switch (op) {
    case CommOp::sum:
      return MPI_SUM;
    case CommOp::max:
      return MPI_MAX;
    case CommOp::min:
      return MPI_MIN;
  }
  throw CommunicationError("MPI: unknown reduction");
}

// MPI counts are int: a larger collective is refused rather than truncated (callers use buckets).
int mpi_count(std::size_t count, std::string_view call) {
  if (count > std::size_t(INT32_MAX))
    throw CommunicationError(str("MPI ", call, ": count ", count, " exceeds 2^31 - 1"));
  return static_cast<int>(count);
}

}  // namespace

double mpi_timeout_seconds(const char* value) {
  return wait_limit_seconds(kMpiTimeoutVariable, value, kDefaultMpiTimeoutS);
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

MpiSession::~MpiSession() { MPI_Finalize(); }

bool MpiSession::launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;
};

MpiCommunicator::MpiCommunicator() : MpiCommunicator(std::make_unique<Handle>(Handle{MPI_COMM_WORLD, false})) {}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Handle> handle) : handle_(std::move(handle)) {
  timeout_s_ = mpi_timeout_seconds(std::getenv(kMpiTimeoutVariable));
  check(MPI_Comm_set_errhandler(handle_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(handle_->comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(handle_->comm, &size_), "MPI_Comm_size");
  MPI_Comm local = MPI_COMM_NULL;
  check(MPI_Comm_split_type(handle_->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  int code = MPI_Comm_rank(local, &node_local_rank_);
  if (code == MPI_SUCCESS) code = MPI_Comm_size(local, &node_ranks_);
  MPI_Comm_free(&local);
  check(code, "MPI_Comm_rank / MPI_Comm_size of the node's ranks");
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color) {
  int world_rank = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
  auto handle = std::make_unique<Handle>();
  check(MPI_Comm_split(MPI_COMM_WORLD, color, world_rank, &handle->comm), "MPI_Comm_split");
  handle->owned = true;
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(handle)));
}

MpiCommunicator::~MpiCommunicator() {
  if (handle_ && handle_->owned) MPI_Comm_free(&handle_->comm);
}

const void* MpiCommunicator::native_handle() const { return &handle_->comm; }

void MpiCommunicator::wait(void* request, std::string_view call) {
  auto* started = static_cast<MPI_Request*>(request);
  wait_for_collective(
      [&] {
        int done = 0;
        const int code = MPI_Test(started, &done, MPI_STATUS_IGNORE);
        if (code != MPI_SUCCESS) fail_job(*this, str("MPI MPI_Test of ", call, " failed: ", mpi_message(code)));
        return done != 0 ? CollectivePoll::done : CollectivePoll::busy;
      },
      no_async_error,
      // The job ends here, not through an exception (a failed MPI_Test too): the collective stays
      // in flight on the caller's buffers, which unwinding would free, and the destructors on the
      // way (a NCCL communicator's destroy) may wait for the rank that stopped.
      [&](const std::string& reason) { fail_job(*this, str(call, " ", reason)); },
      WaitLimit{kMpiTimeoutVariable, timeout_s_,
                "a rank has stopped (stuck in I/O, a debugger, a hung device) or is that far behind; "
                "MPI cannot cancel a started collective, so the job ends"},
      steady_seconds);
}

void MpiCommunicator::all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) {
  const void* from = send == recv ? MPI_IN_PLACE : send;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallreduce(from, recv, mpi_count(count, "MPI_Allreduce"), mpi_type(type), mpi_op(op), handle_->comm,
                       &request),
        "MPI_Iallreduce");
  wait(&request, "MPI_Allreduce");
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) {
  const int n = mpi_count(count, "MPI_Reduce_scatter_block");
  mpi_count(count * std::size_t(size_), "MPI_Reduce_scatter_block");
  const std::size_t block = count * comm_type_bytes(type);
  auto* own_block = static_cast<const char*>(send) + std::size_t(rank_) * block;
  const auto reduce_scatter_into = [&](const void* from, void* into) {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter_block(from, into, n, mpi_type(type), mpi_op(op), handle_->comm, &request),
          "MPI_Ireduce_scatter_block");
    wait(&request, "MPI_Reduce_scatter_block");
  };
  if (recv == own_block) {
    // NCCL's in-place form (recv is this rank's block of send): only that block changes. MPI's
    // in-place form would leave the result at the start of the buffer too, over block 0's own
    // values: a caller that read block 0 where it meant its own (a dropped rank offset) would see
    // its sums and pass on MPI ranks while it fails under NCCL. So the sums land in a block of
    // their own first.
    std::vector<char> sums(block);
    reduce_scatter_into(send, sums.data());
    if (block > 0) std::memcpy(recv, sums.data(), block);
  } else {
    reduce_scatter_into(send, recv);
  }
}

void MpiCommunicator::all_gather(const void* send, void* recv, std::size_t count, CommType type) {
  const int n = mpi_count(count, "MPI_Allgather");
  mpi_count(count * std::size_t(size_), "MPI_Allgather");
  const std::size_t block = count * comm_type_bytes(type);
  const bool in_place = send == static_cast<const char*>(recv) + std::size_t(rank_) * block;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, mpi_type(type), recv, n, mpi_type(type), handle_->comm,
                       &request),
        "MPI_Iallgather");
  wait(&request, "MPI_Allgather");
}

void MpiCommunicator::broadcast(void* buffer, std::size_t count, CommType type, int root) {
  if (root < 0 || root >= size_) throw CommunicationError(str("MPI_Bcast: root ", root, " is not a rank of ", size_));
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(buffer, mpi_count(count, "MPI_Bcast"), mpi_type(type), root, handle_->comm, &request), "MPI_Ibcast");
  wait(&request, "MPI_Bcast");
}

void MpiCommunicator::end_job(int exit_code) { MPI_Abort(MPI_COMM_WORLD, exit_code); }

std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv, std::unique_ptr<MpiSession>& session) {
  if (!MpiSession::launched_by_mpi()) return std::make_unique<SingleProcessCommunicator>();
  // A bad limit is refused before MPI_Init: a rank that exits without it ends the job at once, where
  // one that had joined MPI would wait in MPI_Finalize for peers that read the variable otherwise.
  mpi_timeout_seconds(std::getenv(kMpiTimeoutVariable));
  session = std::make_unique<MpiSession>(argc, argv);
  return std::make_unique<MpiCommunicator>();
}

}  // namespace dflash
