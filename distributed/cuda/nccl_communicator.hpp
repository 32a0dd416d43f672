// NCCL over GPU ranks (TRAINING §13), bootstrapped through MPI: each rank takes the GPU of its
// node-local rank (ranks sharing a node, MPI_COMM_TYPE_SHARED), rank 0 makes the NCCL unique id
// and broadcasts it over MPI, every rank joins with ncclCommInitRank. Buffers are device memory;
// every collective runs on the communicator's stream and is waited for before returning (blocking
// from the caller's view, like the MPI communicator; a collective NCCL reports failed while in
// flight aborts the communicator and throws, stream_wait.hpp), except
// all_reduce_in_place_on_stream, which runs on the caller's stream and returns at once. Every NCCL and CUDA call is checked:
// CommunicationError names the call and the library's message. Built only when CUDA and NCCL are
// found (DFLASH_WITH_NCCL).
#pragma once

#include <memory>

#include "distributed/communicator.hpp"
#include "distributed/mpi_communicator.hpp"

namespace dflash {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks; `bootstrap` must outlive this communicator (abort uses it).
  explicit NcclCommunicator(MpiCommunicator& bootstrap);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_ranks() const override { return bootstrap_.node_ranks(); }
  std::string_view backend() const override { return "nccl"; }
  int device() const { return device_; }  // the CUDA device this rank uses (rank_device.hpp)
  void all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override;
  void all_gather(const void* send, void* recv, std::size_t count, CommType type) override;
  void broadcast(void* buffer, std::size_t count, CommType type, int root) override;
  // ncclAllReduce in place on the caller's stream, not waited for.
  void all_reduce_in_place_on_stream(void* buffer, std::size_t count, CommType type, CommOp op, void* stream) override;
  // Polls `stream` and the communicator's asynchronous error (stream_wait.hpp).
  void wait_for_stream(void* stream) override;
  double wait_limit_seconds() const override;
  void set_wait_limit_seconds(double seconds) override;

 protected:
  void end_job(int exit_code) override;

 private:
  struct State;  // ncclComm_t and cudaStream_t (kept out of this header)
  std::unique_ptr<State> state_;
  MpiCommunicator& bootstrap_;
  int rank_ = 0, size_ = 1, device_ = 0;
};

}  // namespace dflash
