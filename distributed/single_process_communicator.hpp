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

 protected:
  void end_job(int exit_code) override;
};

}  // namespace dflash
