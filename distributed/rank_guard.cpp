#include "distributed/rank_guard.hpp"

#include <exception>
#include <iostream>

namespace dflash {

int run_guarded(Communicator& comm, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::cerr << "dflash: rank " << comm.rank() << " of " << comm.size() << " failed: " << e.what() << std::endl;
  } catch (...) {
    std::cerr << "dflash: rank " << comm.rank() << " of " << comm.size() << " failed: unknown exception" << std::endl;
  }
  comm.abort(1);
}

}  // namespace dflash
