// Run under mpirun by expect_rank_failure.sh (through make_world_communicator, as a program built on
// the training core starts). Rank `argv[1]` fails while every other rank waits in a collective that
// can never complete, in the way `argv[2]` names:
//   throw  it throws: run_guarded must end the whole job (non-zero, within seconds) with a message
//          naming the failed rank;
//   stall  it stops (sleeps 60 s) without failing: the waiting ranks must give up after
//          DFLASH_MPI_TIMEOUT_S and end the job, naming the call and the variable.
//   bad-limit  it reads DFLASH_MPI_TIMEOUT_S=2s where its peers read the script's value (a node the
//          launcher gave another environment): it must refuse it by name before MPI starts, so
//          that the job ends at once; a rank that had joined MPI would wait in MPI_Finalize while
//          its peers wait for it in the collective.
// Without these, the job would hang until the script's timeout.
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "distributed/mpi_communicator.hpp"
#include "distributed/rank_guard.hpp"

int main(int argc, char** argv) {
  const int failing = argc > 1 ? std::atoi(argv[1]) : 1;
  const std::string mode = argc > 2 ? argv[2] : "throw";
  const char* launched_as = std::getenv("OMPI_COMM_WORLD_RANK");
  if (mode == "bad-limit" && launched_as != nullptr && std::atoi(launched_as) == failing) {
    ::setenv("DFLASH_MPI_TIMEOUT_S", "2s", 1);
  }
  std::unique_ptr<dflash::MpiSession> session;
  std::unique_ptr<dflash::Communicator> world;
  try {
    world = dflash::make_world_communicator(&argc, &argv, session);
  } catch (const std::exception& e) {
    std::cerr << "dflash: error: " << e.what() << "\n";
    return 2;
  }
  return dflash::run_guarded(*world, [&] {
    if (world->backend() != "mpi") throw std::runtime_error("mpirun started this rank, but the world is not MPI");
    if (world->rank() == failing) {
      if (mode == "throw") throw std::runtime_error("planted failure in the rank's work");
      if (mode != "stall") throw std::runtime_error("mode " + mode + ": this rank should not have started");
      std::this_thread::sleep_for(std::chrono::seconds(60));  // stopped: the others must not wait this long
    }
    double x = 1;
    world->all_reduce(&x, &x, 1, dflash::CommType::f64, dflash::CommOp::sum);  // waits for the failing rank
    return 0;
  });
}
