// R = 1: every collective is a copy (or nothing, in place). A plain start (no mpirun) uses it.
#pragma once

#include "distributed/communicator.hpp"

namespace dflash {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "single"; }
  void all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override;
  void all_gather(const void* send, void* recv, std::size_t count, CommType type) override;
  void broadcast(void* buffer, std::size_t count, CommType type, int root) override;
  // One rank: the sum is the buffer itself, nothing is enqueued.
  void all_reduce_in_place_on_stream(void*, std::size_t, CommType, CommOp, void*) override {}

 protected:
  void end_job(int exit_code) override;
};

}  // namespace dflash
