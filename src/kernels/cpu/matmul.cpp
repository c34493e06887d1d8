// Matmul dispatch: picks the ISA's kernel for the weight type once per call, quantizes the
// activations once per call into the kernel layout (matmul_internal.h), and splits the weight
// rows over the context's threads. Types without a SIMD kernel, and POWER_FORCE_ISA=scalar,
// take the scalar reference path (f32 decode of each weight row).
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_repack.h"
#include "kernels/cpu/ops.h"
#include "tensor/half.h"
#include "tensor/quant.h"

namespace power {

void matrix_row_f32(const TensorView& w, int64_t r, float* out) {
  const auto* row = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(r) * w.nb[1];
  Status st = dequantize_row(w.type, row, out, w.ne[0]);
  POWER_CHECK_MSG(st.ok(), "dequantize_row failed on a validated tensor");
}

namespace {

void matmul_scalar(CpuContext& ctx, const TensorView& w, const float* x, int64_t ldx,
                   int64_t n_tokens, float* y, int64_t ldy) {
  const int64_t k = w.ne[0];
  const int64_t rows = w.ne[1];
  POWER_CHECK(k <= ctx.max_row());
  ctx.pool().parallel_for(static_cast<size_t>(rows), [&](size_t begin, size_t end, int thread) {
    float* buf = ctx.row_scratch(thread);
    for (size_t r = begin; r < end; ++r) {
      const float* wr;
      if (w.type == GgmlType::F32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0 &&
          w.nb[1] % alignof(float) == 0) {
        wr = reinterpret_cast<const float*>(static_cast<const uint8_t*>(w.data) + r * w.nb[1]);
      } else {
        matrix_row_f32(w, static_cast<int64_t>(r), buf);
        wr = buf;
      }
      for (int64_t t = 0; t < n_tokens; ++t) {
        y[t * ldy + static_cast<int64_t>(r)] = dot_f32(wr, x + t * ldx, k);
      }
    }
  });
}

uint64_t round_up64(uint64_t n) {
  return (n + 63) / 64 * 64;
}

}  // namespace

namespace kernels {

uint64_t act_record_bytes(GgmlType act, int64_t k) {
  const auto uk = static_cast<uint64_t>(k);
  switch (act) {
    case GgmlType::Q8_0:
    case GgmlType::Q8_1:
      return round_up64(uk + uk / 32 * 8);
    case GgmlType::Q8_K:
      return round_up64(uk + uk / 256 * 4 + uk / 16 * 2);
    default:
      return 0;
  }
}

// Quantizes one f32 row with the reference quantizer (ggml blocks in `tmp`) and lays it out
// for the kernels in `rec`.
void quantize_act_record_reference(GgmlType act, const float* x, int64_t k, uint8_t* tmp,
                                   uint8_t* rec) {
  Status st = quantize_activation_row(act, x, tmp, k);
  POWER_CHECK_MSG(st.ok(), "activation quantization failed on a validated shape");
  auto* q = reinterpret_cast<int8_t*>(rec);
  if (act == GgmlType::Q8_K) {
    const int64_t nb = k / 256;
    auto* d = reinterpret_cast<float*>(rec + kernels::act_d_offset(k));
    auto* bsums = reinterpret_cast<int16_t*>(rec + kernels::act_bsums_offset(k));
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = tmp + b * 292;  // f32 d, int8 q[256], int16 bsums[16]
      std::memcpy(d + b, blk, 4);
      std::memcpy(q + 256 * b, blk + 4, 256);
      std::memcpy(bsums + 16 * b, blk + 260, 32);
    }
    return;
  }
  const int64_t nb = k / 32;
  const bool q8_1 = act == GgmlType::Q8_1;
  auto* isum = reinterpret_cast<int32_t*>(rec + kernels::act_isum_offset(k));
  const uint64_t blk_bytes = q8_1 ? 36 : 34;  // f16 d, (f16 s), int8 q[32]
  auto* d = reinterpret_cast<float*>(rec + kernels::act_d_offset(k));
  auto* s = reinterpret_cast<float*>(rec + kernels::act_s_offset(k));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = tmp + static_cast<uint64_t>(b) * blk_bytes;
    uint16_t h;
    std::memcpy(&h, blk, 2);
    d[b] = f16_to_f32(h);
    if (q8_1) {
      std::memcpy(&h, blk + 2, 2);
      s[b] = f16_to_f32(h);
    }
    std::memcpy(q + 32 * b, blk + (q8_1 ? 4 : 2), 32);
    if (!q8_1) {
      int32_t sum = 0;
      for (int e = 0; e < 32; ++e) sum += q[32 * b + e];
      isum[b] = sum;
    }
  }
}

}  // namespace kernels

namespace {

// The entry point of `isa`'s kernel source (avx512 or avx2) applied to t; nullptr on the
// scalar path. The callers name the x86 entry points only where those sources are built.
template <class Fn, class T>
Fn pick_isa(CpuIsa isa, Fn (*avx512)(T), Fn (*avx2)(T), T t) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return avx512(t);
    case CpuIsa::kAvx2:
      return avx2(t);
    case CpuIsa::kScalar:
      break;
  }
  return nullptr;
}

#if defined(POWER_KERNELS_X86)
#define POWER_PICK_ISA(isa, name, t) \
  pick_isa(isa, &kernels::name##_avx512, &kernels::name##_avx2, t)
#else
#define POWER_PICK_ISA(isa, name, t) ((void)(isa), (void)(t), nullptr)
#endif

kernels::ActQuantFn act_quantizer_for(CpuIsa isa, GgmlType act) {
  return POWER_PICK_ISA(isa, act_quantizer, act);
}

kernels::PackedGroupsFn packed_kernel_for(CpuIsa isa, GgmlType type) {
  return POWER_PICK_ISA(isa, matmul_packed, type);
}

kernels::TokenMajorFn token_major_for(CpuIsa isa, GgmlType type) {
  return POWER_PICK_ISA(isa, token_major, type);
}

kernels::MatmulRowsFn kernel_for(CpuIsa isa, GgmlType type) {
  return POWER_PICK_ISA(isa, matmul_rows, type);
}

}  // namespace

bool matmul_has_simd_kernel(GgmlType type) {
  return kernel_for(cpu_isa(), type) != nullptr && vec_dot_activation_type(type).ok();
}

namespace {

// One product of a matmul_same_input call, ready to run: its kernels and arguments, and its
// work items (packed groups of 8 rows plus one item for the rows past the last group, or
// chunks of 4 rows for the ggml-layout kernels).
struct PreparedMatmul {
  kernels::MatmulRowsFn fn = nullptr;
  kernels::PackedGroupsFn packed_fn = nullptr;
  kernels::TokenMajorFn tm_fn = nullptr;  // the packed kernel reads token-major activations
  std::shared_ptr<const kernels::PackedMatrix> packed;
  kernels::MatmulArgs args;
  kernels::PackedArgs pa;
  int64_t rows = 0;
  int64_t n_groups = 0;
  int64_t n_items = 0;

  // Sets packed_fn, packed and tm_fn when the active ISA runs W from a packed copy: `hint`
  // when one is given, else the registry's.
  void find_packed(const TensorView& w, const PackedHint* hint) {
    packed_fn = packed_kernel_for(cpu_isa(), w.type);
    if (packed_fn != nullptr) {
      packed = hint != nullptr && *hint != nullptr ? *hint : kernels::find_packed(w);
    }
    if (packed != nullptr) tm_fn = token_major_for(cpu_isa(), w.type);
  }

  // Fills the arguments and work items for W times the n_tokens rows of x (recs: their
  // quantized records, or null for float weights; tm: their token-major copy or null),
  // fn / packed_fn / tm_fn / packed being set.
  void bind(const TensorView& w, const float* x, int64_t ldx, int64_t n_tokens, const uint8_t* recs,
            uint64_t rec_bytes, const uint8_t* tm, float* y, int64_t ldy) {
    rows = w.ne[1];
    args = {.w = static_cast<const uint8_t*>(w.data),
            .w_row_bytes = w.nb[1],
            .k = w.ne[0],
            .act = recs,
            .act_stride = rec_bytes,
            .x = x,
            .ldx = ldx,
            .n_tokens = n_tokens,
            .y = y,
            .ldy = ldy};
    if (packed == nullptr) {
      n_items = (rows + 3) / 4;  // row chunks of at least 4 rows (decode tiles)
      return;
    }
    // The packed kernels' arguments: the same activations and outputs, the packed groups.
    pa = {.w = packed->data.get(),
          .group_bytes = packed->group_bytes,
          .n_groups = packed->n_groups,
          .k = args.k,
          .act = args.act,
          .act_stride = args.act_stride,
          .act_tm = tm_fn != nullptr ? tm : nullptr,
          .n_tokens = args.n_tokens,
          .y = args.y,
          .ldy = args.ldy};
    n_groups = packed->n_groups;
    n_items = n_groups + (rows > n_groups * kernels::kPackRows ? 1 : 0);
  }

  // Items [b, e) of this product.
  void run(int64_t b, int64_t e) const {
    if (packed != nullptr) {
      const int64_t g1 = std::min(n_groups, e);
      if (b < g1) packed_fn(pa, b, g1);
      if (e > n_groups) fn(args, n_groups * kernels::kPackRows, rows);
    } else {
      fn(args, b * 4, std::min(rows, e * 4));
    }
  }
};

struct QuantizedActivations {
  uint8_t* recs = nullptr;
  const uint8_t* tm = nullptr;  // token-major copy, or null
};

// Quantizes the n_tokens activation rows into the records of type act, and when tm_fn is set
// and the batch is long enough for the token-major tiles, their token-major copy too.
QuantizedActivations quantize_activations(CpuContext& ctx, GgmlType act, const float* x,
                                          int64_t ldx, int64_t k, int64_t n_tokens,
                                          kernels::TokenMajorFn tm_fn) {
  const uint64_t rec_bytes = kernels::act_record_bytes(act, k);
  const kernels::ActQuantFn simd_quant = act_quantizer_for(cpu_isa(), act);
  const int64_t tm_min = cpu_isa() == CpuIsa::kAvx512 ? kernels::kTokenMajorMinTokensVnni
                                                      : kernels::kTokenMajorMinTokens;
  const bool tm = tm_fn != nullptr && n_tokens >= tm_min;
  const int64_t tm_groups = tm ? n_tokens / 8 : 0;
  // rec_bytes is a multiple of 64, so the token-major groups start 64-byte aligned.
  uint8_t* recs =
      ctx.act_scratch(rec_bytes * static_cast<uint64_t>(n_tokens) +
                      static_cast<uint64_t>(tm_groups) * kernels::token_major_group_bytes(k));
  auto quantize = [&](size_t begin, size_t end, int thread) {
    // row_scratch holds max_row floats: more than one ggml-format Q8 row of k <= max_row.
    auto* tmp = reinterpret_cast<uint8_t*>(ctx.row_scratch(thread));
    for (size_t t = begin; t < end; ++t) {
      const float* xt = x + static_cast<int64_t>(t) * ldx;
      if (simd_quant != nullptr) {
        simd_quant(xt, k, recs + t * rec_bytes);
      } else {
        kernels::quantize_act_record_reference(act, xt, k, tmp, recs + t * rec_bytes);
      }
    }
  };
  if (n_tokens == 1) {
    quantize(0, 1, 0);
  } else {
    ctx.pool().parallel_for(static_cast<size_t>(n_tokens), quantize);
  }
  if (!tm) return {recs, nullptr};
  uint8_t* out = recs + rec_bytes * static_cast<uint64_t>(n_tokens);
  ctx.pool().parallel_for(static_cast<size_t>(tm_groups), [&](size_t begin, size_t end, int) {
    tm_fn(recs, rec_bytes, k, static_cast<int64_t>(begin), static_cast<int64_t>(end), out);
  });
  return {recs, out};
}

// One product on its own (any weight type, any path).
void matmul_one(CpuContext& ctx, const TensorView& w, const float* x, int64_t ldx, int64_t n_tokens,
                float* y, int64_t ldy, const PackedHint* hint) {
  const int64_t k = w.ne[0];
  const kernels::MatmulRowsFn fn = kernel_for(cpu_isa(), w.type);
  Result<GgmlType> act_type = vec_dot_activation_type(w.type);
  if (fn == nullptr || !act_type.ok()) {
    matmul_scalar(ctx, w, x, ldx, n_tokens, y, ldy);
    return;
  }
  POWER_CHECK(k <= ctx.max_row());
  PreparedMatmul p;
  p.fn = fn;
  p.find_packed(w, hint);
  const uint64_t rec_bytes = kernels::act_record_bytes(*act_type, k);
  const QuantizedActivations q =
      rec_bytes > 0 ? quantize_activations(ctx, *act_type, x, ldx, k, n_tokens, p.tm_fn)
                    : QuantizedActivations{};
  p.bind(w, x, ldx, n_tokens, q.recs, rec_bytes, q.tm, y, ldy);
  ctx.pool().parallel_for(static_cast<size_t>(p.n_items), [&](size_t begin, size_t end, int) {
    p.run(static_cast<int64_t>(begin), static_cast<int64_t>(end));
  });
}

}  // namespace

void matmul(CpuContext& ctx, const TensorView& w, const float* x, int64_t ldx, int64_t n_tokens,
            float* y, int64_t ldy, const PackedHint& packed) {
  matmul_one(ctx, w, x, ldx, n_tokens, y, ldy, &packed);
}

void matmul_same_input(CpuContext& ctx, std::span<const MatmulJob> jobs, const float* x,
                       int64_t ldx, int64_t n_tokens) {
  if (jobs.empty()) return;
  // One shared pass needs the same activation records for all (same row length and
  // activation type); otherwise one call each. Packed and unpacked products may share it (a
  // Q4_K_M layer's packed Q4_K q/k next to an unpacked Q6_K v): their items cost differently
  // (8 rows vs 4), which the pool's pieces, taken by whichever thread is free, absorb.
  const int64_t k = jobs[0].w->ne[0];
  std::vector<PreparedMatmul> prep(jobs.size());
  GgmlType act = GgmlType::F32;
  kernels::TokenMajorFn tm_fn = nullptr;  // any product's: all write the same layout
  bool shared = true;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const TensorView& w = *jobs[i].w;
    PreparedMatmul& p = prep[i];
    p.fn = kernel_for(cpu_isa(), w.type);
    Result<GgmlType> act_type = vec_dot_activation_type(w.type);
    const bool simd =
        p.fn != nullptr && act_type.ok() && kernels::act_record_bytes(*act_type, w.ne[0]) > 0;
    if (!simd || w.ne[0] != k || (i > 0 && *act_type != act)) {
      shared = false;
      break;
    }
    act = *act_type;
    p.find_packed(w, jobs[i].packed);
    if (p.tm_fn != nullptr) tm_fn = p.tm_fn;
  }
  if (!shared || jobs.size() == 1) {
    for (const MatmulJob& j : jobs) matmul_one(ctx, *j.w, x, ldx, n_tokens, j.y, j.ldy, j.packed);
    return;
  }
  POWER_CHECK(k <= ctx.max_row());
  const QuantizedActivations q = quantize_activations(ctx, act, x, ldx, k, n_tokens, tm_fn);
  const uint64_t rec_bytes = kernels::act_record_bytes(act, k);
  std::vector<int64_t> first_item(jobs.size() + 1, 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    PreparedMatmul& p = prep[i];
    p.bind(*jobs[i].w, x, ldx, n_tokens, q.recs, rec_bytes, q.tm, jobs[i].y, jobs[i].ldy);
    first_item[i + 1] = first_item[i] + p.n_items;
  }
  const int64_t total = first_item.back();
  ctx.pool().parallel_for(static_cast<size_t>(total), [&](size_t begin, size_t end, int) {
    // The products whose items overlap [begin, end), each over its overlapping part.
    for (size_t i = 0; i < prep.size(); ++i) {
      const int64_t b = std::max(static_cast<int64_t>(begin), first_item[i]);
      const int64_t e = std::min(static_cast<int64_t>(end), first_item[i + 1]);
      if (b < e) prep[i].run(b - first_item[i], e - first_item[i]);
    }
  });
}

}  // namespace power
