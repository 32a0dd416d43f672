// A host object that watches a block's shared memory (SharedAccessLog: the bank-conflict trace;
// SharedMediation: the shadow memory) made active, with the DFLASH_SHARED observer that feeds it
// (cuda/exec/shared_access_observer.hpp), for one scope: a test that fails or throws leaves neither
// behind for the next.
#pragma once

#include "cuda/exec/shared_access_observer.hpp"
#include "harness/cuda/shared_access_log.hpp"

namespace dflash {

template <class Host>
class ObserverScope {
 public:
  explicit ObserverScope(SharedAccessObserver observer) {
    Host::active() = &host;
    shared_access_observer() = observer;
  }
  ~ObserverScope() {
    shared_access_observer() = nullptr;
    Host::active() = nullptr;
  }
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;
  Host host;
};

// The observer of the bank-conflict trace: notes the access in the active log, leaves it in place.
inline void* note_and_keep(void* address) {
  note_shared_access(address);
  return address;
}

// The log of one test's scope, fed by every DFLASH_SHARED access.
class TraceScope : public ObserverScope<SharedAccessLog> {
 public:
  TraceScope() : ObserverScope<SharedAccessLog>(note_and_keep) {}
};

}  // namespace dflash
