// Matmul kernels per weight type and ISA (forced with set_cpu_isa_for_testing): matvec (decode,
// 1 token) and matmul (prefill tile, 64 tokens) over a 2048 x 5632 weight (TinyLlama's FFN),
// one thread unless --benchmark_filter picks the /threads:2 variants. Counters: weight bytes
// read per second (bytes_per_second) and multiply-adds as FLOP/s (2 per weight x token).
// Q4_0 and Q8_0 also run on the repacked 8-row layout (kernels/cpu/matmul_repack.h): names
// with /packed/ vs /rows/. tokens:8 is the batched-decode shape (8 streams, one step): compare
// its time with 8 x the tokens:1 time. act_quant/<type>/<reference|isa>: the activation
// quantizers (f32 row -> kernel record) on one 2048-element row. attention/f16/<isa>/keys:N:
// one token's 8-head group over N F16 cached keys (scores, softmax, values).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/context.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_repack.h"
#include "kernels/cpu/ops.h"
#include "tensor/half.h"
#include "tensor/quant.h"

namespace power {
namespace {

constexpr int64_t kK = 2048, kRows = 5632;

struct Weights {
  std::vector<uint8_t> bytes;
  TensorView view;
};

const Weights& weights(GgmlType type) {
  static std::vector<std::pair<GgmlType, Weights>> cache;
  for (auto& [t, w] : cache) {
    if (t == type) return w;
  }
  const GgmlTypeInfo& info = ggml_type_info(type);
  const uint64_t row_bytes = kK / info.block_elems * info.block_bytes;
  Weights w;
  w.bytes.resize(row_bytes * kRows);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> row(kK);
  for (int64_t r = 0; r < kRows; ++r) {
    for (auto& v : row) v = nd(rng);
    (void)quantize_row(type, row.data(), w.bytes.data() + r * row_bytes, kK);
  }
  w.view.type = type;
  w.view.ne = {kK, kRows, 1, 1};
  w.view.nb = {info.block_bytes, row_bytes, row_bytes * kRows, row_bytes * kRows};
  w.view.data = w.bytes.data();
  cache.emplace_back(type, std::move(w));
  return cache.back().second;
}

// The packed copies, registered once per type and kept for the process.
void ensure_packed(const Weights& w) {
  static std::vector<std::unique_ptr<RepackedWeights>> packs;
  if (matmul_uses_repacked(w.view)) return;
  packs.push_back(std::make_unique<RepackedWeights>());
  packs.back()->add(w.view);
}

// A view of the same bytes the registry never matches (one row fewer): the ggml-row kernels.
TensorView unpacked_view(const Weights& w) {
  TensorView v = w.view;
  v.ne[1] = kRows - 8;
  return v;
}

void BM_matmul(benchmark::State& state, GgmlType type, CpuIsa isa, int64_t n_tokens, int threads,
               bool packed) {
  if (!set_cpu_isa_for_testing(isa)) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  const Weights& w = weights(type);
  TensorView view = w.view;
  if (packed) {
    ensure_packed(w);
    if (!matmul_uses_repacked(view)) {
      state.SkipWithError("repacking unavailable (ISA or POWER_REPACK)");
      return;
    }
  } else if (matmul_repack_supported(type)) {
    view = unpacked_view(w);
  }
  std::vector<float> x(static_cast<size_t>(kK * n_tokens), 0.5f), y(kRows * n_tokens);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  CpuContext ctx(threads, kK, 16);
  for (auto _ : state) {
    matmul(ctx, view, x.data(), kK, n_tokens, y.data(), kRows);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(w.bytes.size()));
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * kK * kRows * n_tokens * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// Activation quantizers: one 2048-element row per iteration into a kernel record, the
// reference writer (tensor/quant.h quantizer + layout) vs the ISA's SIMD quantizer. Counter:
// input floats per second.
void BM_act_quant(benchmark::State& state, GgmlType act, CpuIsa isa) {
  kernels::ActQuantFn fn = nullptr;
  if (isa == CpuIsa::kAvx2) fn = kernels::act_quantizer_avx2(act);
  if (isa == CpuIsa::kAvx512) fn = kernels::act_quantizer_avx512(act);
  if (isa != CpuIsa::kScalar && fn == nullptr) {
    state.SkipWithError("no SIMD quantizer for this type");
    return;
  }
  std::vector<float> x(kK);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  const uint64_t bytes = kernels::act_record_bytes(act, kK);
  std::vector<uint8_t> rec(bytes + 64), tmp(kK * 2 + 64);
  uint8_t* r = rec.data() + (64 - reinterpret_cast<uintptr_t>(rec.data()) % 64) % 64;
  for (auto _ : state) {
    if (fn != nullptr) {
      fn(x.data(), kK, r);
    } else {
      kernels::quantize_act_record_reference(act, x.data(), kK, tmp.data(), r);
    }
    benchmark::DoNotOptimize(r);
  }
  state.counters["floats/s"] =
      benchmark::Counter(static_cast<double>(kK) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// Attention of one token's head group over `keys` cached positions of an F16 KV cache (what
// the decoder runs per token and KV head: TinyLlama's 8 query heads per KV head, head_dim 64):
// scores by dot_f16_cols, softmax per query, values by axpy_f16_cols. Counter: multiply-adds
// (2 x rows x keys x head_dim) as FLOP/s.
void BM_attention(benchmark::State& state, CpuIsa isa, int64_t keys) {
  if (!set_cpu_isa_for_testing(isa)) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  constexpr int64_t kRowsQ = 8, kDim = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::vector<float> q(kRowsQ * kDim), kv(static_cast<size_t>(keys * kDim));
  for (auto& v : q) v = nd(rng);
  for (auto& v : kv) v = nd(rng);
  std::vector<uint8_t> k16(static_cast<size_t>(keys * kDim * 2)), v16(k16.size());
  f32_to_f16_row(kv.data(), k16.data(), keys * kDim);
  for (auto& v : kv) v = nd(rng);
  f32_to_f16_row(kv.data(), v16.data(), keys * kDim);
  std::vector<const uint8_t*> kp, vp;
  for (int64_t j = 0; j < keys; ++j) {
    kp.push_back(k16.data() + j * kDim * 2);
    vp.push_back(v16.data() + j * kDim * 2);
  }
  std::vector<float> scores(static_cast<size_t>(kRowsQ * keys)), out(kRowsQ * kDim);
  for (auto _ : state) {
    dot_f16_cols(q.data(), kRowsQ, kDim, kp.data(), keys, kDim, 0.125f, scores.data(), keys);
    for (int64_t r = 0; r < kRowsQ; ++r) softmax(scores.data() + r * keys, keys);
    std::fill(out.begin(), out.end(), 0.0f);
    axpy_f16_cols(out.data(), kRowsQ, kDim, scores.data(), keys, vp.data(), keys, kDim);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(
      4.0 * kRowsQ * kDim * static_cast<double>(keys) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void register_all() {
  for (auto [act, name] : {std::pair<GgmlType, const char*>{GgmlType::Q8_0, "Q8_0"},
                           {GgmlType::Q8_1, "Q8_1"},
                           {GgmlType::Q8_K, "Q8_K"}}) {
    for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (!cpu_isa_available(isa)) continue;
      const std::string id =
          std::string("act_quant/") + name + "/" +
          (isa == CpuIsa::kScalar ? std::string("reference") : std::string(cpu_isa_name(isa)));
      benchmark::RegisterBenchmark(id.c_str(), BM_act_quant, act, isa);
    }
  }
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_available(isa)) continue;
    for (int64_t keys : {64, 512, 4096}) {
      const std::string id = std::string("attention/f16/") + std::string(cpu_isa_name(isa)) +
                             "/keys:" + std::to_string(keys);
      benchmark::RegisterBenchmark(id.c_str(), BM_attention, isa, keys);
    }
  }
  const std::pair<GgmlType, const char*> types[] = {
      {GgmlType::Q4_0, "Q4_0"}, {GgmlType::Q8_0, "Q8_0"}, {GgmlType::Q4_K, "Q4_K"},
      {GgmlType::Q6_K, "Q6_K"}, {GgmlType::Q5_K, "Q5_K"}, {GgmlType::IQ4_NL, "IQ4_NL"},
      {GgmlType::F16, "F16"},   {GgmlType::BF16, "BF16"},
  };
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_available(isa)) continue;
    for (auto [type, name] : types) {
      const bool has_packed =
          isa != CpuIsa::kScalar &&
          (type == GgmlType::Q4_0 || type == GgmlType::Q8_0 || type == GgmlType::Q4_K);
      for (bool packed : {false, true}) {
        if (packed && !has_packed) continue;
        for (int64_t tokens : {1, 8, 64}) {
          for (int threads : {1, 2}) {
            const std::string id =
                std::string("matmul/") + name + "/" + std::string(cpu_isa_name(isa)) +
                (has_packed ? (packed ? "/packed" : "/rows") : "") +
                "/tokens:" + std::to_string(tokens) + "/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(id.c_str(), BM_matmul, type, isa, tokens, threads, packed)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace power

int main(int argc, char** argv) {
  power::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
