// Executable::launch / finish on CUDA: up to two runs queued on the stream, a
// fed input copied from the previous run's output on the device; and text
// generation that runs ahead (RLX_DECODE_RUN_AHEAD) gives the tokens of one
// step at a time, greedy and sampled, stopped early or not.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "rlx/models/llm/generator.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/models/tiny_llm.h"
#include "tests/queued_runs_check.h"

using namespace rlx;

namespace {

bool have_cuda() {
  register_builtin_backends();
  return backend_available("cuda");
}

}  // namespace

TEST(QueuedRunsGpu, FedTokenChain) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  test::check_token_chain("cuda", 12, 2);
  test::check_token_chain("cuda", 5, 1);
}

TEST(QueuedRunsGpu, MisuseIsAClearError) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  test::check_token_chain_errors("cuda");
  Session s("cuda");
  auto exe = test::token_chain(s);
  const Tensor pos0 = test::chain_i32(0, {1});
  for (int i = 0; i < 2; ++i) exe->launch({test::chain_i32(i, {1, 1}), pos0});
  EXPECT_NE(test::error_of([&] { exe->launch({test::chain_i32(2, {1, 1}), pos0}); }).find("at most 2 runs"),
            std::string::npos);
  EXPECT_EQ(exe->finish()[1].data<int32_t>()[0], test::chain_next(0));
  EXPECT_EQ(exe->finish()[1].data<int32_t>()[0], test::chain_next(1));
}

TEST(QueuedRunsGpu, GenerationRunningAheadGivesTheSameTokens) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  namespace fs = std::filesystem;
  const std::string path =
      (fs::temp_directory_path() / ("rlx_test_queued_" + std::to_string(::getpid()) + ".gguf")).string();
  test::write_tiny_gguf(test::tiny_spec("gemma3"), path);
  llm::GeneratorOptions o;
  o.device = "cuda";
  o.ctx = 64;
  llm::Generator gen(path, o);
  const std::vector<int32_t> prompt = {5, 17, 250, 3, 99, 42, 8};
  const llm::SamplingParams greedy{0.0f, 0, 1.0f, 0}, hot{1.2f, 20, 0.9f, 99};
  for (const auto& sp : {greedy, hot}) {
    setenv("RLX_DECODE_RUN_AHEAD", "0", 1);
    const auto one_at_a_time = gen.generate(prompt, 40, sp);
    setenv("RLX_DECODE_RUN_AHEAD", "1", 1);
    const auto ahead = gen.generate(prompt, 40, sp);
    EXPECT_EQ(ahead, one_at_a_time) << "temperature " << sp.temperature;
    EXPECT_EQ(gen.executable().queued(), 0u);
    // Stopped by the callback: the tokens up to the stop, no run left queued,
    // and the next generation is unaffected by the dropped steps.
    for (int64_t stop : {0, 1, 2, 17}) {
      std::vector<int32_t> seen;
      const auto part = gen.generate(prompt, 40, sp, [&](int32_t t) {
        seen.push_back(t);
        return static_cast<int64_t>(seen.size()) <= stop;
      });
      ASSERT_EQ(part.size(), static_cast<size_t>(stop + 1));
      EXPECT_EQ(part, std::vector<int32_t>(one_at_a_time.begin(), one_at_a_time.begin() + stop + 1));
      EXPECT_EQ(part, seen);
      EXPECT_EQ(gen.executable().queued(), 0u);
    }
    for (int64_t n : {1, 2, 3}) {
      const auto short_run = gen.generate(prompt, n, sp);
      EXPECT_EQ(short_run, std::vector<int32_t>(one_at_a_time.begin(), one_at_a_time.begin() + n)) << "n = " << n;
    }
    EXPECT_EQ(gen.generate(prompt, 40, sp), one_at_a_time);
  }
  unsetenv("RLX_DECODE_RUN_AHEAD");
  std::filesystem::remove(path);
}
