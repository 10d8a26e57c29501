// Executable::launch / finish on CUDA: up to two runs queued on the stream, a
// fed input copied from the previous run's output on the device; and text
// generation that runs ahead (RLX_DECODE_RUN_AHEAD) gives the tokens of one
// step at a time, greedy and sampled, stopped early or not.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "rlx/backends/cuda/kernels/io_stage.h"
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

// The staging kernel alone: feeds at odd offsets and lengths, across 16-byte
// vectors, one over another (the later wins) and one a whole vector, against
// the same copies made on the host.
TEST(QueuedRunsGpu, StagingKernelAppliesFeedsInOrder) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  constexpr size_t kBytes = 96;
  struct Feed {
    uint32_t dst, bytes;
  };
  const std::vector<Feed> feeds = {{20, 4}, {29, 7}, {21, 3}, {48, 16}, {95, 1}};
  uint8_t* stage = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&stage), cuda::kIoStageHeaderBytes + kBytes, cudaHostAllocMapped),
            cudaSuccess);
  uint8_t *dst = nullptr, *src = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dst), kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&src), 64 * feeds.size()), cudaSuccess);
  std::vector<uint8_t> src_host(64 * feeds.size()), want(kBytes);
  for (size_t i = 0; i < src_host.size(); ++i) src_host[i] = static_cast<uint8_t>(0x80 + i * 7);
  for (size_t i = 0; i < kBytes; ++i) want[i] = static_cast<uint8_t>(i);
  ASSERT_EQ(cudaMemcpy(src, src_host.data(), src_host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  cuda::IoStageHeader h{};
  h.feeds = static_cast<uint32_t>(feeds.size());
  for (size_t f = 0; f < feeds.size(); ++f) {
    const size_t from = 64 * f + f;  // each feed's source starts at a different alignment
    h.feed[f] = {src + from, feeds[f].dst, feeds[f].bytes};
    std::memcpy(want.data() + feeds[f].dst, src_host.data() + from, feeds[f].bytes);
  }
  std::memcpy(stage, &h, sizeof h);
  for (size_t i = 0; i < kBytes; ++i) stage[cuda::kIoStageHeaderBytes + i] = static_cast<uint8_t>(i);
  cuda::launch_io_stage_in(stage, dst, kBytes, nullptr);
  std::vector<uint8_t> got(kBytes);
  ASSERT_EQ(cudaMemcpy(got.data(), dst, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < kBytes; ++i) EXPECT_EQ(got[i], want[i]) << "byte " << i;
  cudaFree(dst);
  cudaFree(src);
  cudaFreeHost(stage);
}
