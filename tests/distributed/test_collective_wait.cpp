// wait_for_collective (distributed/collective_wait.hpp), the wait of the MPI and NCCL
// communicators, with fakes for the collective, the library's asynchronous error and the clock: it
// returns when the collective is done, and fails (never hangs) when the library reports an error
// while busy or the collective stays unfinished past the limit; and the limits' variables.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/collective_wait.hpp"
#include "distributed/mpi_communicator.hpp"
#include "io/errors.hpp"

namespace dflash {
namespace {

// A collective that is done after `busy_polls` polls; past `hang_after` polls the wait would hang
// on a real one, so the fake stops the test instead.
struct FakeCollective {
  int busy_polls = 0, hang_after = 1000000, polls = 0;
  CollectivePoll operator()() {
    if (++polls > hang_after) throw std::logic_error("the wait kept polling a collective that never ends");
    return polls > busy_polls ? CollectivePoll::done : CollectivePoll::busy;
  }
};

struct Failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void throw_failed(const std::string& reason) { throw Failed(reason); }

const WaitLimit kNoLimit{"DFLASH_TEST_TIMEOUT_S", 0.0, "a peer stopped"};
WaitLimit limit_of(double seconds) { return {"DFLASH_TEST_TIMEOUT_S", seconds, "a peer stopped"}; }
double still_clock() { return 0.0; }
// A steady clock that advances `step` seconds each time it is read.
struct FakeClock {
  double step = 1.0, t = 0.0;
  double operator()() { return t += step; }
};

TEST(CollectiveWait, ReturnsWhenTheCollectiveIsDone) {
  FakeCollective collective{.busy_polls = 5};
  int asked = 0;
  wait_for_collective(
      std::ref(collective),
      [&]() -> std::optional<std::string> {
        ++asked;
        return std::nullopt;
      },
      throw_failed, kNoLimit, still_clock);
  EXPECT_EQ(collective.polls, 6);
  EXPECT_EQ(asked, 5) << "the library is asked once after each busy poll";
}

TEST(CollectiveWait, ADoneCollectiveIsNotAskedAboutErrors) {
  FakeCollective collective{.busy_polls = 0};
  wait_for_collective(
      std::ref(collective), []() -> std::optional<std::string> { return std::string("stale error"); }, throw_failed,
      kNoLimit, still_clock);
  EXPECT_EQ(collective.polls, 1);
}

TEST(CollectiveWait, AnAsyncErrorWhileBusyFailsInsteadOfHanging) {
  FakeCollective collective{.busy_polls = 1 << 30, .hang_after = 100};  // never ends: its peer died
  int asked = 0;
  try {
    wait_for_collective(
        std::ref(collective),
        [&]() -> std::optional<std::string> {
          return ++asked < 3 ? std::nullopt
                             : std::optional<std::string>("remote process exited or there was a network error");
        },
        throw_failed, kNoLimit, still_clock);
    FAIL() << "the wait returned";
  } catch (const Failed& e) {
    EXPECT_STREQ(e.what(), "remote process exited or there was a network error");
  }
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(collective.polls, 3);
}

TEST(CollectiveWait, AnErrorOfThePollItselfPropagates) {
  int polls = 0;
  EXPECT_THROW(wait_for_collective(
                   [&]() -> CollectivePoll {
                     if (++polls == 2) throw std::runtime_error("MPI_Test failed");
                     return CollectivePoll::busy;
                   },
                   no_async_error, throw_failed, kNoLimit, still_clock),
               std::runtime_error);
  EXPECT_EQ(polls, 2);
}

// A rank that stopped, or died where no connection breaks: the library never reports an error and
// the collective never ends.
TEST(CollectiveWait, ACollectiveStillBusyPastTheLimitFailsNamingTheVariableAndTheCause) {
  FakeCollective collective{.busy_polls = 1 << 30, .hang_after = 1000};
  FakeClock clock;
  try {
    wait_for_collective(std::ref(collective), no_async_error, throw_failed, limit_of(10.0), std::ref(clock));
    FAIL() << "the wait returned";
  } catch (const Failed& e) {
    EXPECT_STREQ(e.what(), "not finished after 10 s (DFLASH_TEST_TIMEOUT_S): a peer stopped");
  }
  EXPECT_EQ(collective.polls, 11) << "the clock read once at the start and after each busy poll, 1 s apart";
}

TEST(CollectiveWait, ACollectiveDoneWithinTheLimitReturnsAndNoLimitNeverFails) {
  FakeCollective in_time{.busy_polls = 9};
  FakeClock clock;
  wait_for_collective(std::ref(in_time), no_async_error, throw_failed, limit_of(10.0), std::ref(clock));
  EXPECT_EQ(in_time.polls, 10);
  FakeCollective slow{.busy_polls = 500};
  FakeClock hours{.step = 3600.0};
  wait_for_collective(std::ref(slow), no_async_error, throw_failed, kNoLimit, std::ref(hours));
  EXPECT_EQ(slow.polls, 501);
}

TEST(CollectiveWait, TheLimitIsMeasuredFromTheStartOfTheWaitNotFromTheClocksZero) {
  FakeCollective collective{.busy_polls = 20};
  FakeClock late{.step = 1.0, .t = 1e6};  // a steady clock's epoch is arbitrary: days since boot
  wait_for_collective(std::ref(collective), no_async_error, throw_failed, limit_of(30.0), std::ref(late));
  EXPECT_EQ(collective.polls, 21);
}

// A steady clock that advances by the listed steps, one a read, then by 1 s a read.
struct ScriptedClock {
  std::vector<double> steps;
  std::size_t reads = 0;
  double t = 0.0;
  double operator()() {
    t += reads < steps.size() ? steps[reads] : 1.0;
    ++reads;
    return t;
  }
};

// Slurm's scontrol suspend, gang scheduling and preemption stop every rank (SIGSTOP) and resume it
// later: the steady clock ran on, but no peer kept this one waiting. A wait resumed after a pause
// longer than the limit must not fail on its first poll: the pause adds kPausedGapS, no more.
TEST(CollectiveWait, APauseOfTheProcessAddsAtMostThePauseGap) {
  FakeCollective collective{.busy_polls = 8};
  ScriptedClock suspended{.steps = {0.0, 1.0, 1.0, 1000.0}};  // the job stopped for 1000 s at the 3rd poll
  wait_for_collective(std::ref(collective), no_async_error, throw_failed, limit_of(10.0), std::ref(suspended));
  EXPECT_EQ(collective.polls, 9) << "1 + 1 + 2 (the pause) + 5 = 9 s at the 8th busy poll: within 10 s";
  // A peer that stops after the pause still ends the wait.
  FakeCollective stopped_peer{.busy_polls = 1 << 30, .hang_after = 1000};
  ScriptedClock again{.steps = {0.0, 1.0, 1.0, 1000.0}};
  EXPECT_THROW(
      wait_for_collective(std::ref(stopped_peer), no_async_error, throw_failed, limit_of(10.0), std::ref(again)),
      Failed);
  EXPECT_EQ(stopped_peer.polls, 10) << "1 + 1 + 2 + 7 = 11 s > 10 s at poll 10";
}

// A poll loop slower than the pause gap (a call that blocks, a wedged driver) still reaches the
// limit: each gap counts kPausedGapS.
TEST(CollectiveWait, PollsSlowerThanThePauseGapStillReachTheLimit) {
  for (const double gap : {kPausedGapS, 5.0, 600.0}) {
    FakeCollective collective{.busy_polls = 1 << 30, .hang_after = 1000};
    FakeClock slow_polls{.step = gap};
    EXPECT_THROW(
        wait_for_collective(std::ref(collective), no_async_error, throw_failed, limit_of(10.0), std::ref(slow_polls)),
        Failed)
        << "polls " << gap << " s apart";
    EXPECT_EQ(collective.polls, 6) << "2 s counted a poll: 12 s > 10 s at the 6th (polls " << gap << " s apart)";
  }
}

TEST(WaitLimitSeconds, UnsetIsTheDefaultZeroIsNoneAndBadValuesAreRefusedByName) {
  EXPECT_EQ(wait_limit_seconds("DFLASH_X_S", nullptr, 42.0), 42.0);
  EXPECT_EQ(wait_limit_seconds("DFLASH_X_S", "", 42.0), 42.0);
  EXPECT_EQ(wait_limit_seconds("DFLASH_X_S", "0", 42.0), 0.0);
  EXPECT_EQ(wait_limit_seconds("DFLASH_X_S", "90.5", 42.0), 90.5);
  for (const char* bad : {"abc", "-1", "inf", "nan", "1e999", "60s", " ", "1 h"}) {
    try {
      wait_limit_seconds("DFLASH_X_S", bad, 42.0);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("DFLASH_X_S"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(str("'", bad, "'")), std::string::npos) << e.what();
    }
  }
}

// The MPI communicator's limit (mpi_communicator.hpp): an hour unless set, so that the longest
// healthy wait - peers waiting while the lead writes a checkpoint or scans its share of the data -
// never reaches it.
TEST(MpiTimeout, UnsetIsAnHourAndBadValuesAreRefusedNamingTheVariable) {
  EXPECT_EQ(kMpiTimeoutVariable, std::string_view("DFLASH_MPI_TIMEOUT_S"));
  EXPECT_EQ(mpi_timeout_seconds(nullptr), 3600.0);
  EXPECT_EQ(mpi_timeout_seconds("0"), 0.0);
  EXPECT_EQ(mpi_timeout_seconds("7.5"), 7.5);
  try {
    mpi_timeout_seconds("10m");
    ADD_FAILURE() << "'10m' accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("DFLASH_MPI_TIMEOUT_S"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dflash
