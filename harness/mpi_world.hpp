// The MPI world of a test binary run under mpirun (mpi_test_main.cpp owns MPI_Init).
#pragma once

#include "distributed/mpi_communicator.hpp"

namespace dflash::testing {

MpiCommunicator& world();

}  // namespace dflash::testing
