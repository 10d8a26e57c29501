// Executable::launch / finish on the CPU backend, which has no run queue: each
// launch runs at once and a fed input takes the last run's output on the host.
#include <gtest/gtest.h>

#include "tests/queued_runs_check.h"

TEST(QueuedRuns, FedTokenChainOnTheCpu) {
  rlx::test::check_token_chain("cpu", 12, 2);
  rlx::test::check_token_chain("cpu", 5, 1);
}

TEST(QueuedRuns, MisuseIsAClearErrorOnTheCpu) { rlx::test::check_token_chain_errors("cpu"); }
