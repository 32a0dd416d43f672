// SIGINT/SIGTERM end a training run cleanly (TRAINING §15): the handler only records the request;
// the loop finishes the step in flight, writes a checkpoint and exits with 0. Under mpirun the
// launcher forwards the signal to every rank, but ranks may see it at different steps, so the loop
// agrees on stopping through the communicator (any rank's request stops all after the same step).
#pragma once

#include <csignal>

namespace dflash {

class StopSignal {
 public:
  // Installs the handlers; the destructor restores the previous ones.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  static bool requested();
  static int signal_number();  // the signal received (0: none)

 private:
  struct sigaction previous_int_ {
  }, previous_term_{};
};

}  // namespace dflash
