// How ranks talk (TRAINING §13): one interface, three implementations: single process
// (single_process_communicator.hpp), MPI over CPU ranks (mpi_communicator.hpp) and NCCL over GPU
// ranks (nccl_communicator.hpp, built only with CUDA and NCCL). Buffers are host memory for the
// first two and device memory for NCCL. Every collective is blocking from the caller's view and is
// called by every rank of the communicator in the same order with the same counts.
//
// In-place conventions are NCCL's, which every implementation honours:
//   all_reduce      send == recv;
//   reduce_scatter  recv == send + rank() * count (rank r's block of the send buffer);
//   all_gather      send == recv + rank() * count.
// A failed call throws CommunicationError naming the collective and the library's message. An MPI
// collective that started and cannot finish (past DFLASH_MPI_TIMEOUT_S, or its MPI_Test failing)
// ends the job where it waits instead (rank_guard.hpp's fail_job): MPI cannot cancel it, and
// unwinding would free its buffers while it is in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dflash {

enum class CommType { f32, f64, i64 };
enum class CommOp { sum, max, min };

std::size_t comm_type_bytes(CommType type);
std::string_view comm_type_name(CommType type);

class CommunicationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The ranks of this communicator on this rank's node (they share its host memory and its GPUs):
  // 1 for a single process; MPI finds them by shared memory (MPI_COMM_TYPE_SHARED), under any
  // launcher (mpirun, srun, hydra).
  virtual int node_ranks() const { return 1; }
  virtual std::string_view backend() const = 0;  // "single", "mpi", "nccl"

  // recv[i] = op over ranks of send[i], i < count, on every rank.
  virtual void all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) = 0;
  // send holds size() blocks of count elements; rank r receives op over ranks of block r.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) = 0;
  // Every rank sends count elements; recv holds size() blocks, block r from rank r.
  virtual void all_gather(const void* send, void* recv, std::size_t count, CommType type) = 0;
  // count elements of root's buffer to every rank's.
  virtual void broadcast(void* buffer, std::size_t count, CommType type, int root) = 0;
  // The sum (op) over ranks of a device buffer, in place, enqueued on `stream` (a cudaStream_t:
  // this header stays CUDA-free) after everything the stream waits for, and not waited for: it is
  // done when the stream is. What lets a step reduce a bucket on a communication stream while the
  // backward goes on (distributed/cuda/bucket_reduction.hpp). Communicators of host memory do not
  // have it (CommunicationError naming the backend); the single-process one has nothing to do.
  virtual void all_reduce_in_place_on_stream(void* buffer, std::size_t count, CommType type, CommOp op, void* stream);
  // Returns once `stream`'s work is done, and throws CommunicationError instead of waiting forever
  // when a collective on it has failed (NCCL: the communicator's asynchronous error, a peer or the
  // network lost; distributed/cuda/stream_wait.hpp). Communicators whose collectives are done when
  // they return have nothing in flight: nothing to do.
  virtual void wait_for_stream(void* stream);
  // The limit, in seconds (0: none), of this communicator's waits for a collective
  // (collective_wait.hpp: DFLASH_MPI_TIMEOUT_S, DFLASH_NCCL_TIMEOUT_S), and setting it (what
  // WaitLimitLifted does for a scope). A communicator whose collectives never wait for a peer has
  // none, and ignores the setting.
  virtual double wait_limit_seconds() const { return 0.0; }
  virtual void set_wait_limit_seconds(double /*seconds*/) {}
  // Ends every rank of the job now (MPI_Abort), after the caller has printed why; never returns
  // (if an implementation's end_job ever came back, this process still exits with exit_code).
  [[noreturn]] void abort(int exit_code);

 protected:
  virtual void end_job(int exit_code) = 0;
};

// No limit on `comm`'s waits for a scope, the previous one back after it: for a collective whose
// healthy wait the run cannot bound (the ranks' data scans: their difference grows with the data
// and the file system, to hours at 10 TB), where a limit would end a healthy job.
class WaitLimitLifted {
 public:
  explicit WaitLimitLifted(Communicator& comm) : comm_(comm), saved_(comm.wait_limit_seconds()) {
    comm_.set_wait_limit_seconds(0.0);
  }
  ~WaitLimitLifted() { comm_.set_wait_limit_seconds(saved_); }
  WaitLimitLifted(const WaitLimitLifted&) = delete;
  WaitLimitLifted& operator=(const WaitLimitLifted&) = delete;

 private:
  Communicator& comm_;
  double saved_;
};

// Typed conveniences (host buffers or device buffers alike: only the pointer is passed on).
inline void all_reduce_sum(Communicator& c, std::span<double> values) {
  c.all_reduce(values.data(), values.data(), values.size(), CommType::f64, CommOp::sum);
}
inline void all_reduce_sum(Communicator& c, std::span<std::int64_t> values) {
  c.all_reduce(values.data(), values.data(), values.size(), CommType::i64, CommOp::sum);
}

}  // namespace dflash
