// wait_for_stream (distributed/cuda/stream_wait.hpp), the NCCL communicator's wait for its
// collectives, with fakes for the stream, the communicator's asynchronous error and the clock: it
// returns when the stream drains, and fails (never hangs) when the communicator reports an error
// while busy or the stream stays busy past the limit (DFLASH_NCCL_TIMEOUT_S).
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

constexpr double kNoLimit = 0.0;
double still_clock() { return 0.0; }
// A steady clock that advances `step` seconds each time it is read.
struct FakeClock {
  double step = 1.0, t = 0.0;
  double operator()() { return t += step; }
};
std::optional<std::string> no_error() { return std::nullopt; }

TEST(StreamWait, ReturnsWhenTheStreamDrains) {
  FakeStream stream{.busy_polls = 5};
  int asked = 0;
  wait_for_stream(
      std::ref(stream),
      [&]() -> std::optional<std::string> {
        ++asked;
        return std::nullopt;
      },
      [](const std::string& e) { throw Failed(e); }, kNoLimit, still_clock);
  EXPECT_EQ(stream.polls, 6);
  EXPECT_EQ(asked, 5) << "the communicator is asked once after each busy poll";
}

TEST(StreamWait, ADrainedStreamIsNotAskedAboutErrors) {
  FakeStream stream{.busy_polls = 0};
  wait_for_stream(
      std::ref(stream), []() -> std::optional<std::string> { return std::string("stale error"); },
      [](const std::string& e) { throw Failed(e); }, kNoLimit, still_clock);
  EXPECT_EQ(stream.polls, 1);
}

TEST(StreamWait, AnAsyncErrorWhileBusyFailsInsteadOfHanging) {
  FakeStream stream{.busy_polls = 1 << 30, .hang_after = 100};  // never drains: a collective whose peer died
  int asked = 0;
  try {
    wait_for_stream(
        std::ref(stream),
        [&]() -> std::optional<std::string> {
          return ++asked < 3 ? std::nullopt
                             : std::optional<std::string>("remote process exited or there was a network error");
        },
        [](const std::string& e) { throw Failed(e); }, kNoLimit, still_clock);
    FAIL() << "the wait returned";
  } catch (const Failed& e) {
    EXPECT_STREQ(e.what(), "remote process exited or there was a network error");
  }
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(stream.polls, 3);
}

TEST(StreamWait, AnErrorOfTheStreamItselfPropagates) {
  int polls = 0;
  EXPECT_THROW(wait_for_stream(
                   [&]() -> StreamPoll {
                     if (++polls == 2) throw std::runtime_error("an illegal memory access was encountered");
                     return StreamPoll::busy;
                   },
                   []() -> std::optional<std::string> { return std::nullopt; },
                   [](const std::string& e) { throw Failed(e); }, kNoLimit, still_clock),
               std::runtime_error);
  EXPECT_EQ(polls, 2);
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
    EXPECT_NE(std::string(e.what()).find("not finished after 10 s (DFLASH_NCCL_TIMEOUT_S)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(stream.polls, 11) << "the clock read once at the start and after each busy poll, 1 s apart";
}

TEST(StreamWait, AStreamThatDrainsWithinTheLimitReturnsAndNoLimitNeverFails) {
  FakeStream in_time{.busy_polls = 9};
  FakeClock clock;
  wait_for_stream(
      std::ref(in_time), no_error, [](const std::string& e) { throw Failed(e); }, 10.0, std::ref(clock));
  EXPECT_EQ(in_time.polls, 10);
  FakeStream slow{.busy_polls = 500};
  FakeClock hours{.step = 3600.0};
  wait_for_stream(
      std::ref(slow), no_error, [](const std::string& e) { throw Failed(e); }, kNoLimit, std::ref(hours));
  EXPECT_EQ(slow.polls, 501);
}

TEST(CollectiveTimeout, UnsetIsHalfAnHourZeroIsNoneAndBadValuesAreRefusedByName) {
  EXPECT_EQ(collective_timeout_seconds(nullptr), 1800.0);
  EXPECT_EQ(collective_timeout_seconds(""), 1800.0);
  EXPECT_EQ(collective_timeout_seconds("0"), 0.0);
  EXPECT_EQ(collective_timeout_seconds("90.5"), 90.5);
  for (const char* bad : {"abc", "-1", "inf", "nan", "1e999", "60s", " "}) {
    try {
      collective_timeout_seconds(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("DFLASH_NCCL_TIMEOUT_S"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dflash
