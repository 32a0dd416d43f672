// A communicator that passes every collective on to another one: the base of the tests'
// communicators that watch a step's collectives (record their order, keep a copy of a result)
// without changing what they do. A subclass overrides the collectives it watches and calls
// ForwardingCommunicator's for the work.
#pragma once

#include <cstddef>
#include <string_view>

#include "distributed/communicator.hpp"

namespace dflash::testing {

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int node_ranks() const override { return inner_.node_ranks(); }
  std::string_view backend() const override { return inner_.backend(); }
  void all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override {
    inner_.all_reduce(send, recv, count, type, op);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override {
    inner_.reduce_scatter(send, recv, count, type, op);
  }
  void all_gather(const void* send, void* recv, std::size_t count, CommType type) override {
    inner_.all_gather(send, recv, count, type);
  }
  void broadcast(void* buffer, std::size_t count, CommType type, int root) override {
    inner_.broadcast(buffer, count, type, root);
  }
  void all_reduce_in_place_on_stream(void* buffer, std::size_t count, CommType type, CommOp op, void* stream) override {
    inner_.all_reduce_in_place_on_stream(buffer, count, type, op, stream);
  }
  void wait_for_stream(void* stream) override { inner_.wait_for_stream(stream); }
  double wait_limit_seconds() const override { return inner_.wait_limit_seconds(); }
  void set_wait_limit_seconds(double seconds) override { inner_.set_wait_limit_seconds(seconds); }

 protected:
  void end_job(int exit_code) override { inner_.abort(exit_code); }

 private:
  Communicator& inner_;
};

}  // namespace dflash::testing
