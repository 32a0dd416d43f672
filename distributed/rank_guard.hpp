// A rank that fails must not leave the others waiting in a collective forever (TRAINING §13,
// faults): run_guarded runs a rank's work; if it throws, the rank prints
// "dflash: rank r of R failed: <what>" on stderr and ends the whole job through
// Communicator::abort (MPI_Abort), so every rank exits non-zero within seconds, naming the failed one.
#pragma once

#include <functional>
#include <string_view>

#include "distributed/communicator.hpp"

namespace dflash {

// Returns body()'s exit code; never returns if body throws.
int run_guarded(Communicator& comm, const std::function<int()>& body);

// Prints "dflash: rank r of R failed: <what>" and ends the job (Communicator::abort), here, without
// unwinding the stack: for a failure after which no destructor may run first (a collective that
// cannot be cancelled is still in flight on buffers the unwinding would free, and a NCCL
// communicator's destroy would wait for the peer that stopped).
[[noreturn]] void fail_job(Communicator& comm, std::string_view what);

}  // namespace dflash
