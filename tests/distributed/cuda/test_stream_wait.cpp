// wait_for_stream (distributed/cuda/stream_wait.hpp), the NCCL communicator's wait for its
// collectives, with fakes for the stream and the communicator's asynchronous error: it returns when
// the stream drains, and fails (never hangs) when the communicator reports an error while busy.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "distributed/cuda/stream_wait.hpp"

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

TEST(StreamWait, ReturnsWhenTheStreamDrains) {
  FakeStream stream{.busy_polls = 5};
  int asked = 0;
  wait_for_stream(
      std::ref(stream),
      [&]() -> std::optional<std::string> {
        ++asked;
        return std::nullopt;
      },
      [](const std::string& e) { throw Failed(e); });
  EXPECT_EQ(stream.polls, 6);
  EXPECT_EQ(asked, 5) << "the communicator is asked once after each busy poll";
}

TEST(StreamWait, ADrainedStreamIsNotAskedAboutErrors) {
  FakeStream stream{.busy_polls = 0};
  wait_for_stream(
      std::ref(stream), []() -> std::optional<std::string> { return std::string("stale error"); },
      [](const std::string& e) { throw Failed(e); });
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
        [](const std::string& e) { throw Failed(e); });
    FAIL() << "the wait returned";
  } catch (const Failed& e) {
    EXPECT_STREQ(e.what(), "remote process exited or there was a network error");
  }
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(stream.polls, 3);
}

TEST(StreamWait, AnErrorOfTheStreamItselfPropagates) {
  int polls = 0;
  EXPECT_THROW(
      wait_for_stream(
          [&]() -> StreamPoll {
            if (++polls == 2) throw std::runtime_error("an illegal memory access was encountered");
            return StreamPoll::busy;
          },
          []() -> std::optional<std::string> { return std::nullopt; }, [](const std::string& e) { throw Failed(e); }),
      std::runtime_error);
  EXPECT_EQ(polls, 2);
}

}  // namespace
}  // namespace dflash
