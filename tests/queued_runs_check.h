// Queued runs with a fed input (Executable::launch / finish), the decode
// loop's pattern: each run computes the next token from its input token, the
// next run takes that token on the device, and the host gives only the
// position. Shared by the CPU test (runs at launch) and the CUDA test (a real
// queue).
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "rlx/ir/builder.h"
#include "rlx/runtime/session.h"
#include "tests/test_util.h"

namespace rlx::test {

constexpr int kChainVocab = 16;
inline int32_t chain_next(int32_t t) { return (5 * t + 3) % kChainVocab; }

// token = argmax(onehot(tok) · perm) = chain_next(tok); trace[pos] = tok (a
// state, so the runs' order and positions show in "sum", its total).
inline std::shared_ptr<Executable> token_chain(Session& s) {
  Graph g;
  auto trace = state(g, "trace", DType::F32, {1, kChainVocab, 1});
  auto tok = input(g, "tok", DType::I32, {1, 1});
  auto pos = input(g, "pos", DType::I32, {1});
  auto table = param(g, "table", DType::F32, {kChainVocab, kChainVocab});
  auto perm = param(g, "perm", DType::F32, {kChainVocab, kChainVocab});
  auto logits = matmul(reshape(gather(table, tok), {1, kChainVocab}), perm);
  auto written = write_slice(trace, reshape(cast(tok, DType::F32), {1, 1, 1}), pos, 1);
  output("sum", reduce(ReduceFn::Sum, written, {1, 2}));
  output("token", argmax(logits, 1));
  auto exe = s.compile(g);
  std::vector<float> eye(kChainVocab * kChainVocab, 0.0f), p(kChainVocab * kChainVocab, 0.0f);
  for (int t = 0; t < kChainVocab; ++t) {
    eye[static_cast<size_t>(t * kChainVocab + t)] = 1.0f;
    p[static_cast<size_t>(t * kChainVocab + chain_next(t))] = 1.0f;
  }
  exe->set_param("table", Tensor::from(eye, {kChainVocab, kChainVocab}));
  exe->set_param("perm", Tensor::from(p, {kChainVocab, kChainVocab}));
  return exe;
}

inline Tensor chain_i32(int32_t v, std::vector<int64_t> shape) { return Tensor::from(std::vector<int32_t>{v}, shape); }

// A plain run at position 0, then `steps` fed runs with up to `depth` queued.
// The fed input's own tensor holds 99, outside the table: used, it would fail.
inline void check_token_chain(const std::string& device, int steps, size_t depth) {
  Session s(device);
  auto exe = token_chain(s);
  std::vector<int32_t> want = {3};  // want[k]: the token run k reads
  auto first = exe->run({chain_i32(3, {1, 1}), chain_i32(0, {1})});
  want.push_back(chain_next(3));
  ASSERT_EQ(first[1].data<int32_t>()[0], want[1]);
  ASSERT_FLOAT_EQ(first[0].data<float>()[0], 3.0f);
  int launched = 0, finished = 0;
  float sum = 3.0f;
  while (finished < steps) {
    while (launched < steps && exe->queued() < depth) {
      ++launched;
      exe->launch({chain_i32(99, {1, 1}), chain_i32(launched, {1})}, {{0, 1}});
    }
    auto outs = exe->finish();
    ++finished;
    sum += static_cast<float>(want[static_cast<size_t>(finished)]);
    want.push_back(chain_next(want.back()));
    EXPECT_EQ(outs[1].data<int32_t>()[0], want.back()) << device << ": token of fed run " << finished;
    EXPECT_FLOAT_EQ(outs[0].data<float>()[0], sum) << device << ": the trace after fed run " << finished;
  }
  EXPECT_EQ(exe->queued(), 0u);
  const Tensor trace = exe->read_state("trace");
  for (int k = 0; k <= steps; ++k)
    EXPECT_FLOAT_EQ(trace.data<float>()[k], static_cast<float>(want[static_cast<size_t>(k)])) << device << ": row " << k;
  // A plain run after the queue still works, and a fed run follows it.
  auto again = exe->run({chain_i32(7, {1, 1}), chain_i32(0, {1})});
  EXPECT_EQ(again[1].data<int32_t>()[0], chain_next(7));
  exe->launch({chain_i32(99, {1, 1}), chain_i32(1, {1})}, {{0, 1}});
  EXPECT_EQ(exe->finish()[1].data<int32_t>()[0], chain_next(chain_next(7))) << device;
}

// What queued runs refuse, each with a message naming the problem.
inline void check_token_chain_errors(const std::string& device) {
  Session s(device);
  auto exe = token_chain(s);
  const Tensor pos0 = chain_i32(0, {1});
  EXPECT_NE(error_of([&] { exe->finish(); }).find("no run is queued"), std::string::npos);
  EXPECT_NE(error_of([&] { exe->launch({chain_i32(1, {1, 1}), pos0}, {{0, 1}}); })
                .find("a fed input takes an output of the previous run"),
            std::string::npos);
  exe->launch({chain_i32(1, {1, 1}), pos0});
  EXPECT_NE(error_of([&] { exe->run({chain_i32(1, {1, 1}), pos0}); }).find("1 queued run(s) are not finished"),
            std::string::npos);
  EXPECT_NE(error_of([&] { exe->read_state("trace"); }).find("read_state: 1 queued run(s)"), std::string::npos);
  EXPECT_NE(error_of([&] { exe->launch({chain_i32(1, {1, 1}), pos0}, {{2, 1}}); }).find("feed input index 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { exe->launch({chain_i32(1, {1, 1}), pos0}, {{0, 5}}); }).find("feed output index 5"),
            std::string::npos);
  EXPECT_NE(error_of([&] { exe->launch({chain_i32(1, {1, 1}), pos0}, {{0, 0}}); })
                .find("input 'tok' (i32) cannot be fed from output 'sum' (f32)"),
            std::string::npos);
  EXPECT_EQ(exe->finish()[1].data<int32_t>()[0], chain_next(1));
  // Dropping queued runs leaves the executable usable.
  exe->launch({chain_i32(2, {1, 1}), pos0});
  exe->launch({chain_i32(99, {1, 1}), chain_i32(1, {1})}, {{0, 1}});
  exe->discard_queued();
  EXPECT_EQ(exe->queued(), 0u);
  EXPECT_EQ(exe->run({chain_i32(4, {1, 1}), pos0})[1].data<int32_t>()[0], chain_next(4));
  // Destroyed with runs still queued: it waits for them.
  exe->launch({chain_i32(5, {1, 1}), pos0});
  exe.reset();
}

}  // namespace rlx::test
