// MatMul and FusedMatMulBiasAct on the CPU: shape bookkeeping (batch
// broadcasting, transposes) around gemm_f32 (gemm.cpp). f16/bf16 operands
// are staged to f32 by KernelArgs; all arithmetic is f32.
#include <vector>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/gemm.h"
#include "rlx/core/env.h"

namespace rlx::cpu {
namespace {

// Element offset of each output batch's operand, honouring numpy broadcasting
// of the operand's batch dims (right-aligned) against the output's.
std::vector<int64_t> batch_offsets(const std::vector<int64_t>& out_batch, const std::vector<int64_t>& dims,
                                   int64_t matrix_elems) {
  const size_t nb = out_batch.size();
  const size_t rank_b = dims.size() - 2;
  int64_t total = 1;
  for (int64_t d : out_batch) total *= d;
  std::vector<int64_t> strides(nb, 0);  // 0 where the operand broadcasts
  int64_t s = matrix_elems;
  for (size_t i = 0; i < rank_b; ++i) {
    const size_t od = nb - 1 - i, id = rank_b - 1 - i;
    strides[od] = dims[id] == 1 ? 0 : s;
    s *= dims[id];
  }
  std::vector<int64_t> offs(static_cast<size_t>(total));
  std::vector<int64_t> idx(nb, 0);
  for (int64_t t = 0; t < total; ++t) {
    int64_t off = 0;
    for (size_t d = 0; d < nb; ++d) off += idx[d] * strides[d];
    offs[static_cast<size_t>(t)] = off;
    for (size_t d = nb; d-- > 0;) {
      if (++idx[d] < out_batch[d]) break;
      idx[d] = 0;
    }
  }
  return offs;
}

// bf16 A · B with B shared by every batch, on AMX tiles or by VDPBF16PS: no
// f32 staging of the operands. False where neither applies or is available.
bool try_matmul_bf16(KernelArgs& args, bool ta, bool tb, const float* bias, Activation act) {
  if (ta || args.in_dtype(0) != DType::BF16 || args.in_dtype(1) != DType::BF16 || args.out_dtype() != DType::BF16 ||
      args.in_dims(1).size() != 2)
    return false;
  const auto& ad = args.in_dims(0);
  const auto& od = args.out_dims();
  GemmBf16Problem p;
  p.N = od.back();
  p.K = ad.back();
  p.M = 1;
  for (size_t i = 0; i + 1 < od.size(); ++i) p.M *= od[i];
  const Bf16Gemm kernel = bf16_gemm_for(p.M);
  if (kernel == Bf16Gemm::None) return false;
  p.lda = p.K;
  p.trans_b = tb;
  p.a = static_cast<const uint16_t*>(args.in_raw(0));
  p.b = static_cast<const uint16_t*>(args.in_raw(1));
  p.c = static_cast<uint16_t*>(args.out_raw());  // written as bf16: no f32 staging
  p.bias = bias;
  p.act = act;
  std::shared_ptr<const void> packed;
  if (ParamCache* cache = args.param_cache(1)) {
    // A weight: packed once and kept with it (about its own size again) until it is next set.
    packed = cache->get(str("bf16 vnni K=", p.K, " N=", p.N, " tb=", tb), [&] {
      return std::make_shared<const std::vector<uint16_t>>(bf16_pack_b(args.pool, p));
    });
    p.b_packed = static_cast<const std::vector<uint16_t>*>(packed.get())->data();
  }
  if (kernel == Bf16Gemm::Amx) gemm_bf16_amx(args.pool, p);
  else gemm_bf16_avx512(args.pool, p);
  return true;
}

void run_matmul(KernelArgs& args, bool ta, bool tb, const float* bias, Activation act) {
  if (try_matmul_bf16(args, ta, tb, bias, act)) return;
  const auto& ad = args.in_dims(0);
  const auto& bd = args.in_dims(1);
  const auto& od = args.out_dims();
  GemmProblem p;
  p.M = od[od.size() - 2];
  p.N = od[od.size() - 1];
  p.K = ta ? ad[ad.size() - 2] : ad[ad.size() - 1];
  p.trans_a = ta;
  p.trans_b = tb;
  p.bias = bias;
  p.act = act;
  p.rounds_to_bf16 = args.out_dtype() == DType::BF16;
  p.a = args.in_f32(0);
  p.c = args.out_f32();

  const std::vector<int64_t> out_batch(od.begin(), od.end() - 2);
  int64_t batch = 1;
  for (int64_t d : out_batch) batch *= d;
  int64_t b_batch = 1;
  for (size_t i = 0; i + 2 < bd.size(); ++i) b_batch *= bd[i];

  std::vector<int64_t> a_off, b_off;
  std::shared_ptr<const void> packed;
  if (b_batch == 1 && !ta) {
    // B is shared by every batch and A's rows are contiguous: one GEMM of
    // batch·M rows (A's batch dims then equal the output's).
    p.M *= batch;
    p.batch = 1;
    ParamCache* cache = args.param_cache(1);
    if (cache && p.K > 0 && gemm_packs_b(p) && env_bool("RLX_CPU_PACK_WEIGHTS")) {
      // A weight: converted (16-bit) and packed once, and kept (K·N f32) until it is next set. An f32
      // weight is packed too: on a 2-core Zen 4 its packing was 6-7% of a short-text embedding run
      // (~1% on the 2-core Sapphire Rapids of session 52), for one more f32 copy of the weights.
      packed = cache->get(str("f32 gemm K=", p.K, " N=", p.N, " tb=", tb), [&] {
        p.b = args.in_f32(1);
        return std::make_shared<const std::vector<float>>(gemm_pack_b(args.pool, p));
      });
      p.b_packed = static_cast<const std::vector<float>*>(packed.get())->data();
      p.b = nullptr;
      gemm_f32(args.pool, p);
      return;
    }
  } else {
    p.batch = batch;
    a_off = batch_offsets(out_batch, ad, p.M * p.K);
    b_off = batch_offsets(out_batch, bd, p.K * p.N);
    p.a_off = a_off.data();
    p.b_off = b_off.data();
  }
  p.b = args.in_f32(1);
  gemm_f32(args.pool, p);
}

void matmul_kernel(KernelArgs& args) {
  const auto& a = args.attrs<MatMulAttrs>();
  run_matmul(args, a.transpose_a, a.transpose_b, nullptr, Activation::None);
}

void matmul_bias_act_kernel(KernelArgs& args) {
  const auto& a = args.attrs<FusedMatMulBiasActAttrs>();
  run_matmul(args, false, a.transpose_b, args.in_f32(2), a.act);
}

// ScaledMatMul: the fp8 operands widened to f32 (exactly), one f32 GEMM with
// b as [N, K], then the scales and the bias applied to the f32 sums, which
// finish() rounds once to the result dtype. A weight (param) b is widened and
// packed once and kept with it, as the 16-bit weights of MatMul are.
void scaled_matmul_kernel(KernelArgs& args) {
  const auto& od = args.out_dims();
  GemmProblem p;
  p.N = od.back();
  p.K = args.in_dims(0).back();
  p.M = p.N > 0 ? args.out_numel() / p.N : 0;
  p.trans_b = true;
  p.c = args.out_f32();
  if (p.M == 0 || p.N == 0) return;
  p.a = args.in_f32(0);
  std::shared_ptr<const void> packed;
  ParamCache* cache = args.param_cache(1);
  if (cache && p.K > 0 && gemm_packs_b(p) && env_bool("RLX_CPU_PACK_WEIGHTS")) {
    packed = cache->get(str("f32 gemm K=", p.K, " N=", p.N, " tb=1"), [&] {
      p.b = args.in_f32(1);
      return std::make_shared<const std::vector<float>>(gemm_pack_b(args.pool, p));
    });
    p.b_packed = static_cast<const std::vector<float>*>(packed.get())->data();
  } else {
    p.b = args.in_f32(1);
  }
  gemm_f32(args.pool, p);
  const float* sa = args.in<float>(2);
  const float* sb = args.in<float>(3);
  const bool rows_a = args.in_numel(2) != 1, rows_b = args.in_numel(3) != 1;
  const float* bias = args.num_inputs() == 5 ? args.in_f32(4) : nullptr;
  float* c = p.c;
  const int64_t N = p.N;
  args.pool.parallel_for(p.M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      float* row = c + m * N;
      const float s = sa[rows_a ? m : 0];
      for (int64_t n = 0; n < N; ++n) {
        const float v = (s * sb[rows_b ? n : 0]) * row[n];
        row[n] = bias ? v + bias[n] : v;
      }
    }
  });
}

}  // namespace

void register_matmul_kernels() {
  register_cpu_float_kernel(OpKind::MatMul, {DType::F32, DType::F32, DType::F32}, matmul_kernel,
                            "matmul (blocked / OpenBLAS; bf16 on AMX tiles or AVX512-BF16 where available)");
  // The bias may be stored in another float type than A and B.
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (DType bias : {DType::F32, DType::F16, DType::BF16})
      register_cpu_kernel(OpKind::FusedMatMulBiasAct, {t, t, bias, t}, matmul_bias_act_kernel,
                          str("matmul+bias+act (blocked / OpenBLAS", t == DType::BF16 ? " / AMX / AVX512-BF16" : "", ") [",
                              dtype_name(t), ", bias ", dtype_name(bias), t == DType::F32 ? "" : "; f32 compute", "]"));
  for (DType a : {DType::F8E4M3, DType::F8E5M2})
    for (DType b : {DType::F8E4M3, DType::F8E5M2})
      for (DType out : {DType::F32, DType::F16, DType::BF16}) {
        const std::string what = str("fp8 matmul [", dtype_name(a), " x ", dtype_name(b), " -> ", dtype_name(out),
                                     "] (widened to f32, blocked / OpenBLAS GEMM)");
        register_cpu_kernel(OpKind::ScaledMatMul, {a, b, DType::F32, DType::F32, out}, scaled_matmul_kernel, what);
        register_cpu_kernel(OpKind::ScaledMatMul, {a, b, DType::F32, DType::F32, out, out}, scaled_matmul_kernel,
                            what + " + bias");
      }
}

}  // namespace rlx::cpu
