// main() of the tests that run under mpirun: MPI is initialised before GoogleTest and finalised
// after it. Every rank runs every test; a failure on any rank makes that rank, and so mpirun,
// exit non-zero. Rank 0 prints GoogleTest's usual output; the other ranks print only their
// failures, prefixed with the rank. Property binaries get CI's RapidCheck parameters unless
// RC_PARAMS is set (as properties/support/property_main.cpp does); every rank draws the same cases.
#include <cstdlib>
#include <iostream>

#include <gtest/gtest.h>

#include "distributed/mpi_communicator.hpp"
#include "harness/mpi_world.hpp"

namespace dflash::testing {

MpiCommunicator& world() {
  static MpiCommunicator comm;
  return comm;
}

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::cerr << "[rank " << rank_ << "] " << (result.file_name() ? result.file_name() : "?") << ":"
              << result.line_number() << ": " << result.summary() << std::endl;
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace dflash::testing

int main(int argc, char** argv) {
  if (std::getenv("RC_PARAMS") == nullptr) setenv("RC_PARAMS", DFLASH_RC_PARAMS, 1);
  dflash::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = dflash::testing::world().rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new dflash::testing::RankFailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
