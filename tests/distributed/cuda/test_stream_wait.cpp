// wait_for_stream (distributed/cuda/stream_wait.hpp), the NCCL communicator's wait for its
// collectives: wait_for_collective (tested with fakes in tests/distributed/test_collective_wait.cpp)
// under the NCCL limit. Here, with fakes for the stream, the communicator's asynchronous error and
// the clock: a stream busy past the limit fails naming DFLASH_NCCL_TIMEOUT_S, the communicator's
// error passes through as it is, and the variable's default and refusals.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "distributed/cuda/stream_wait.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

// A stream that drains after `busy_polls` polls; past `hang_after` polls the wait would hang on a
// real stream, so the fake stops the test instead.
struct FakeStream {
  int busy_polls = 0, hang_after = 1000000, polls = 0;
  StreamPoll operator()() {
    if (++polls > hang_after) throw std::logic_error("the wait kept polling a stream that never drains");
    return polls > busy_polls ? StreamPoll::done : StreamPoll::busy;
  }
};

struct Failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A steady clock that advances `step` seconds each time it is read.
struct FakeClock {
  double step = 1.0, t = 0.0;
  double operator()() { return t += step; }
};
std::optional<std::string> no_error() { return std::nullopt; }

TEST(StreamWait, AnAsyncErrorWhileBusyFailsWithTheCommunicatorsMessage) {
  FakeStream stream{.busy_polls = 1 << 30, .hang_after = 100};  // never drains: a collective whose peer died
  FakeClock clock;
  try {
    wait_for_stream(
        std::ref(stream),
        [&]() -> std::optional<std::string> {
          return stream.polls < 3 ? std::nullopt
                                  : std::optional<std::string>("remote process exited or there was a network error");
        },
        [](const std::string& e) { throw Failed(e); }, 1800.0, std::ref(clock));
    FAIL() << "the wait returned";
  } catch (const Failed& e) {
    EXPECT_STREQ(e.what(), "remote process exited or there was a network error");
  }
  EXPECT_EQ(stream.polls, 3);
}

// A rank that died without NCCL noticing (peers on one node: shared memory, no connection to
// break) or stopped: the communicator never reports an error, the stream never drains.
TEST(StreamWait, AStreamStillBusyPastTheLimitFailsNamingTheVariable) {
  FakeStream stream{.busy_polls = 1 << 30, .hang_after = 1000};
  FakeClock clock;
  try {
    wait_for_stream(
        std::ref(stream), no_error, [](const std::string& e) { throw Failed(e); }, 10.0, std::ref(clock));
    FAIL() << "the wait returned";
  } catch (const Failed& e) {
    EXPECT_NE(std::string(e.what()).find("not finished after 10 s (DFLASH_NCCL_TIMEOUT_S): a rank has died or "
                                         "stopped without NCCL noticing"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(stream.polls, 11) << "the clock read once at the start and after each busy poll, 1 s apart";
}

TEST(StreamWait, ZeroIsNoLimit) {
  FakeStream slow{.busy_polls = 500};
  FakeClock hours{.step = 3600.0};
  wait_for_stream(
      std::ref(slow), no_error, [](const std::string& e) { throw Failed(e); }, 0.0, std::ref(hours));
  EXPECT_EQ(slow.polls, 501);
}

TEST(NcclTimeout, UnsetIsHalfAnHourZeroIsNoneAndBadValuesAreRefusedByName) {
  EXPECT_EQ(nccl_timeout_seconds(nullptr), 1800.0);
  EXPECT_EQ(nccl_timeout_seconds(""), 1800.0);
  EXPECT_EQ(nccl_timeout_seconds("0"), 0.0);
  EXPECT_EQ(nccl_timeout_seconds("90.5"), 90.5);
  for (const char* bad : {"abc", "-1", "inf", "60s", " "}) {
    try {
      nccl_timeout_seconds(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("DFLASH_NCCL_TIMEOUT_S"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dflash
