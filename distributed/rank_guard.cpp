#include "distributed/rank_guard.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "io/errors.hpp"

namespace dflash {

namespace {

// One write of the whole line: mpirun forwards each rank's stderr in the chunks the rank wrote, and
// its own MPI_Abort banner must not land inside the message.
void report_failure(const Communicator& comm, std::string_view what) {
  const std::string line = str("dflash: rank ", comm.rank(), " of ", comm.size(), " failed: ", what, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

int run_guarded(Communicator& comm, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    fail_job(comm, e.what());
  } catch (...) {
    fail_job(comm, "unknown exception");
  }
}

void fail_job(Communicator& comm, std::string_view what) {
  report_failure(comm, what);
  comm.abort(1);
}

}  // namespace dflash
