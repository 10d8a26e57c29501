#include <gtest/gtest.h>

#include <cmath>

#include "rlx/ir/builder.h"
#include "rlx/ir/custom_op.h"
#include "tests/test_util.h"

using namespace rlx;

namespace {

using rlx::test::error_of;

}  // namespace

TEST(IR, InfersBroadcastAndMatmulShapes) {
  Graph g;
  auto x = input(g, "x", DType::F32, {"B", "L", 384});
  auto w = param(g, "w", DType::F32, {384, 1536});
  auto b = param(g, "b", DType::F32, {1536});
  auto y = matmul(x, w) + b;
  EXPECT_EQ(shape_to_string(y.shape()), "[B, L, 1536]");
  auto s = softmax(y);
  EXPECT_EQ(s.dtype(), DType::F32);
  auto r = reduce(ReduceFn::Mean, y, {1}, true);
  EXPECT_EQ(shape_to_string(r.shape()), "[B, 1, 1536]");
  auto am = argmax(y);
  EXPECT_EQ(am.dtype(), DType::I32);
  EXPECT_EQ(shape_to_string(am.shape()), "[B, L]");
}

TEST(IR, ShapeErrorsNameTheNodeAndOp) {
  Graph g;
  auto x = input(g, "x", DType::F32, {4, 8});
  auto w = param(g, "w", DType::F32, {7, 3});
  std::string msg = error_of([&] { matmul(x, w); });
  EXPECT_NE(msg.find("MatMul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node %2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inner dims differ"), std::string::npos) << msg;

  auto h = input(g, "h", DType::F16, {4, 8});
  msg = error_of([&] { x + h; });
  EXPECT_NE(msg.find("Binary"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtype"), std::string::npos) << msg;

  auto z = input(g, "z", DType::F32, {5, 8});
  msg = error_of([&] { x + z; });
  EXPECT_NE(msg.find("do not broadcast"), std::string::npos) << msg;
  EXPECT_THROW(input(g, "x", DType::F32, {1}), InvalidArgument);  // duplicate input name
}

TEST(IR, AttentionAndRopeValidateTheirAttributes) {
  Graph g;
  auto q = input(g, "q", DType::F16, {"B", "L", 8 * 64});
  auto kv = input(g, "kv", DType::F16, {"B", "S", 2 * 64});
  AttentionAttrs a{8, 2, 64};
  EXPECT_EQ(shape_to_string(attention(q, kv, kv, a).shape()), "[B, L, 512]");
  a.num_kv_heads = 3;
  EXPECT_NE(error_of([&] { attention(q, kv, kv, a); }).find("multiple of num_kv_heads"), std::string::npos);
  a.num_kv_heads = 2;
  a.mask = MaskKind::SlidingWindow;
  EXPECT_NE(error_of([&] { attention(q, kv, kv, a); }).find("window"), std::string::npos);

  auto qkv = input(g, "qkv", DType::F32, {1, 5, 3 * 4 * 16});
  auto pos = input(g, "pos", DType::I32, {5});
  RopeAttrs r{4, 16, 8, RopePairing::Interleaved, 10000.0f, 1.0f, 64};
  EXPECT_EQ(shape_to_string(rope(qkv, pos, r).shape()), "[1, 5, 64]");
  r.src_offset = 150;
  EXPECT_NE(error_of([&] { rope(qkv, pos, r); }).find("heads end at column"), std::string::npos);
  // Frequency factors: n_rot/2 of them, each finite and positive; they enter the graph hash.
  r.src_offset = 64;
  const uint64_t plain_hash = [&] {
    Graph h;
    output("y", rope(input(h, "x", DType::F32, {1, 5, 192}), input(h, "p", DType::I32, {5}), r));
    return h.fingerprint();
  }();
  r.freq_factors = {1.0f, 2.0f, 4.0f};
  EXPECT_NE(error_of([&] { rope(qkv, pos, r); }).find("3 frequency factors for n_rot 8"), std::string::npos);
  r.freq_factors = {1.0f, 2.0f, 0.0f, 8.0f};
  EXPECT_NE(error_of([&] { rope(qkv, pos, r); }).find("frequency factor 2 is 0"), std::string::npos);
  r.freq_factors = {1.0f, 2.0f, NAN, 8.0f};
  EXPECT_NE(error_of([&] { rope(qkv, pos, r); }).find("must be finite and positive"), std::string::npos);
  r.freq_factors = {1.0f, 2.0f, 4.0f, 8.0f};
  Graph h;
  output("y", rope(input(h, "x", DType::F32, {1, 5, 192}), input(h, "p", DType::I32, {5}), r));
  EXPECT_NE(h.fingerprint(), plain_hash);
  const std::vector<double> f = rope_inv_freq(r);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_DOUBLE_EQ(f[3], std::pow(10000.0, -6.0 / 8.0) / 8.0);
}

TEST(IR, SymbolicReshapeChecksSymbolsAndStaticProduct) {
  Graph g;
  auto x = input(g, "x", DType::F32, {"B", "L", 384});
  EXPECT_EQ(shape_to_string(reshape(x, {"B", "L", 12, 32}).shape()), "[B, L, 12, 32]");
  EXPECT_THROW(reshape(x, {"B", "L", 12, 30}), ShapeError);
  EXPECT_THROW(reshape(x, {"B", 384, "T"}), ShapeError);
}

TEST(IR, SpecializeBindsSymbolsAndReportsInconsistency) {
  Graph g;
  auto x = input(g, "x", DType::F32, {"B", 8});
  auto y = input(g, "y", DType::F32, {"B", 8});
  output("s", narrow(x + y, 0, 0, 5));
  Graph ok = specialize(g, {{"B", 6}});
  EXPECT_EQ(shape_to_string(ok.node(ok.outputs()[0].second).type.shape), "[5, 8]");
  EXPECT_EQ(shape_to_string(ok.node(0).type.shape), "[6, 8]");
  // Different symbols never broadcast against each other at build time.
  auto z = input(g, "z", DType::F32, {"C", 8});
  EXPECT_THROW(x + z, ShapeError);
  std::string msg = error_of([&] { specialize(g, {{"B", 3}, {"C", 1}}); });
  EXPECT_NE(msg.find("Narrow"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exceeds dim 3"), std::string::npos) << msg;
}

TEST(IR, NarrowFromTheEndResolvesAtSpecialization) {
  Graph g;
  auto x = input(g, "x", DType::F32, {"L", 4});
  auto last = narrow(x, 0, -2, 2);  // the last two rows, whatever L is
  output("last", last);
  EXPECT_EQ(g.node(last.id).attr<NarrowAttrs>().start, -2);
  for (int64_t L : {2, 7}) {
    Graph s = specialize(g, {{"L", L}});
    const Node& n = s.node(s.outputs()[0].second);
    EXPECT_EQ(n.attr<NarrowAttrs>().start, L - 2);
    EXPECT_EQ(shape_to_string(n.type.shape), "[2, 4]");
  }
  std::string msg = error_of([&] { specialize(g, {{"L", 1}}); });
  EXPECT_NE(msg.find("Narrow"), std::string::npos) << msg;
  // A static axis resolves when the op is built; a run that crosses the end is refused.
  auto y = input(g, "y", DType::F32, {5, 4});
  EXPECT_EQ(g.node(narrow(y, 0, -1, 1).id).attr<NarrowAttrs>().start, 4);
  EXPECT_THROW(narrow(x, 0, -1, 2), ShapeError);
  EXPECT_THROW(narrow(y, 0, -6, 1), ShapeError);
}

TEST(IR, VerifierCatchesCorruptedTypes) {
  Graph g;
  auto x = input(g, "x", DType::F32, {2, 3});
  auto y = relu(x);
  output("y", y);
  verify(g);
  g.mutable_node(y.id).type.shape = {Dim(2), Dim(4)};
  std::string msg = error_of([&] { verify(g); });
  EXPECT_NE(msg.find("node %1 (Unary)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stored type"), std::string::npos) << msg;
}

TEST(IR, UnknownCustomOpIsAClearError) {
  Graph g;
  auto x = input(g, "x", DType::F32, {2});
  std::string msg = error_of([&] { custom("no_such_op", {x}); });
  EXPECT_NE(msg.find("custom op 'no_such_op' is not registered"), std::string::npos) << msg;

  register_custom_op({"double_it", 1, 1, [](const std::vector<TensorType>& in, const CustomAttrs&) { return in[0]; }});
  EXPECT_EQ(custom("double_it", {x}).dtype(), DType::F32);
}

TEST(IR, FingerprintFollowsStructureAndAttributes) {
  auto build = [](float eps) {
    Graph g;
    auto x = input(g, "x", DType::F32, {"B", 16});
    auto gm = param(g, "g", DType::F32, {16});
    output("y", rms_norm(x, gm, eps));
    return g;
  };
  EXPECT_EQ(build(1e-6f).fingerprint(), build(1e-6f).fingerprint());
  EXPECT_NE(build(1e-6f).fingerprint(), build(1e-5f).fingerprint());
}

TEST(IR, PrinterListsNodesAndOutputs) {
  Graph g;
  auto x = input(g, "x", DType::BF16, {4});
  output("out", gelu_tanh(x));
  std::string p = print_graph(g);
  EXPECT_NE(p.find("%1 = Unary{gelu_tanh}(%0) : bf16[4]"), std::string::npos) << p;
  EXPECT_NE(p.find("output out = %1"), std::string::npos) << p;
}
