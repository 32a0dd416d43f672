// Run under mpirun by expect_rank_failure.sh: rank `argv[1]` throws while every other rank waits in
// a collective that can never complete. run_guarded must end the whole job (non-zero, within
// seconds) with a message naming the failed rank; without it the job would hang until the timeout.
#include <cstdlib>
#include <stdexcept>

#include "distributed/mpi_communicator.hpp"
#include "distributed/rank_guard.hpp"

int main(int argc, char** argv) {
  dflash::MpiSession session(&argc, &argv);
  dflash::MpiCommunicator world;
  const int failing = argc > 1 ? std::atoi(argv[1]) : 1;
  return dflash::run_guarded(world, [&] {
    if (world.rank() == failing) throw std::runtime_error("planted failure in the rank's work");
    double x = 1;
    world.all_reduce(&x, &x, 1, dflash::CommType::f64, dflash::CommOp::sum);  // waits for the failed rank
    return 0;
  });
}
