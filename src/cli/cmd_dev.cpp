// `power dev synth`: seeded random-weight llama (and Mamba) models of benchmark shapes, written
// with our
// GGUF writer and reference quantizer, with the llama-spm vocabulary copied from a vocab-only
// GGUF (../shared/fixtures/tokenizer/ggml-vocab-llama-spm.gguf) so that llama.cpp loads the
// same file. Weights are N(0, std) from a counter-based generator (the same seed gives the same
// file); norms are 1. Tensors are generated and quantized one at a time while the file is
// streamed (add_tensor_deferred), so memory stays at one tensor.
// Type mixes follow llama-quantize's defaults for the llama architecture: output.weight is
// Q6_K unless the file type is Q8_0; Q4_K_M also stores attn_v and ffn_down as Q6_K in the
// first and last eighth of the layers and every third layer between.
// mamba-130m is state-spaces/mamba-130m's shape (768 wide, 24 layers, inner 1536, state 16,
// conv 4, dt rank 48) with the 32000-token vocabulary and an untied output: ssm_in, ssm_x,
// ssm_out, token_embd and output take the file type (output Q6_K as above), the small or
// element-wise tensors stay F32 (conv1d, dt with its 48 columns, A, D, biases, norms), A is
// Mamba's initialisation -(1..16) per channel, D is 1 and the dt bias -3 (softplus 0.049).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/thread_pool.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "format/gguf.h"
#include "tensor/quant.h"

namespace power::cli {
namespace {

struct SynthShape {
  const char* name;
  int64_t n_embd, n_ff, n_layer, n_head, n_head_kv, n_vocab, n_ctx;
  // Mamba (n_head 0): inner size, state size, conv kernel, dt rank.
  int64_t d_inner = 0, d_state = 0, d_conv = 0, dt_rank = 0;
};

// tinyllama-1.1b: TinyLlama-1.1B's shape. 134m: a llama of 134M parameters with the 32000-token
// vocabulary (768 wide, 12 layers, 12 heads, untied output). tiny: 64 wide, 2 layers (tests).
constexpr SynthShape kShapes[] = {
    {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 2048},
    {"134m", 768, 2048, 12, 12, 12, 32000, 2048},
    {"tiny", 64, 128, 2, 4, 2, 32000, 512},
    {"mamba-130m", 768, 0, 24, 0, 0, 32000, 2048, 1536, 16, 4, 48},
};

struct SynthOptions {
  std::string shape = "134m";
  std::string type = "q4_0";
  std::string vocab;
  std::string out;
  uint64_t seed = 1;
  float weight_std = 0.02f;
  int mtp = 0;  // MTP (NextN) layers appended after the main layers
  int threads = 0;
};

struct FileType {
  const char* name;
  GgmlType base;
  bool k_m;           // Q4_K_M mix
  uint32_t ftype_id;  // general.file_type (llama_ftype)
};
constexpr FileType kFileTypes[] = {
    {"q4_0", GgmlType::Q4_0, false, 2},  {"q8_0", GgmlType::Q8_0, false, 7},
    {"q4_k", GgmlType::Q4_K, false, 14}, {"q4_k_m", GgmlType::Q4_K, true, 15},
    {"q6_k", GgmlType::Q6_K, false, 18}, {"f16", GgmlType::F16, false, 1},
    {"f32", GgmlType::F32, false, 0},
};

// splitmix64 over (seed, tensor, index): reproducible and cheap; Box-Muller for normals.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
void fill_normal(uint64_t key, float stddev, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t r = mix64(key + static_cast<uint64_t>(i));
    const double u1 = (static_cast<double>(r >> 40) + 0.5) / 16777216.0;
    const double u2 = static_cast<double>((r >> 16) & 0xffffff) / 16777216.0;
    const double rad = std::sqrt(-2.0 * std::log(u1)) * stddev;
    out[i] = static_cast<float>(rad * std::cos(6.283185307179586 * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(rad * std::sin(6.283185307179586 * u2));
  }
}

Status synth(const SynthOptions& o) {
  const SynthShape* shape = nullptr;
  for (const auto& s : kShapes) {
    if (o.shape == s.name) shape = &s;
  }
  if (shape == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "unknown --shape (tinyllama-1.1b, 134m, tiny, mamba-130m)")
        .with("shape", o.shape);
  }
  const FileType* ft = nullptr;
  for (const auto& f : kFileTypes) {
    if (o.type == f.name) ft = &f;
  }
  if (ft == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "unknown --type (q4_0, q8_0, q4_k, q4_k_m, q6_k, f16, f32)")
        .with("type", o.type);
  }
  if (o.mtp < 0 || o.mtp > 4) {
    return Status(StatusCode::kInvalidArgument, "--mtp must be 0..4").with("mtp", o.mtp);
  }
  POWER_ASSIGN_OR_RETURN(auto vocab, GgufFile::open(o.vocab));
  const SynthShape& s = *shape;
  const bool is_mamba = s.n_head == 0;
  if (is_mamba && o.mtp > 0) {
    return Status(StatusCode::kInvalidArgument, "--mtp needs a llama shape").with("shape", s.name);
  }
  GgufWriter w;
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", GgufValue::str(is_mamba ? "mamba" : "llama"));
  w.set("general.name", GgufValue::str(std::string("power-synth-") + s.name + "-" + ft->name));
  if (is_mamba) {  // llama.cpp's convert_hf_to_gguf.py keys for Mamba
    w.set("mamba.context_length", u32(s.n_ctx));
    w.set("mamba.embedding_length", u32(s.n_embd));
    w.set("mamba.feed_forward_length", u32(0));
    w.set("mamba.attention.head_count", u32(0));
    w.set("mamba.block_count", u32(s.n_layer));
    w.set("mamba.ssm.conv_kernel", u32(s.d_conv));
    w.set("mamba.ssm.inner_size", u32(s.d_inner));
    w.set("mamba.ssm.state_size", u32(s.d_state));
    w.set("mamba.ssm.time_step_rank", u32(s.dt_rank));
    w.set("mamba.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
  } else {
    w.set("llama.context_length", u32(s.n_ctx));
    w.set("llama.embedding_length", u32(s.n_embd));
    w.set("llama.block_count", u32(s.n_layer + o.mtp));
    if (o.mtp > 0) w.set("llama.nextn_predict_layers", u32(o.mtp));
    w.set("llama.feed_forward_length", u32(s.n_ff));
    w.set("llama.rope.dimension_count", u32(s.n_embd / s.n_head));
    w.set("llama.attention.head_count", u32(s.n_head));
    w.set("llama.attention.head_count_kv", u32(s.n_head_kv));
    w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
    w.set("llama.rope.freq_base", GgufValue::f32(10000.0f));
    w.set("llama.vocab_size", u32(s.n_vocab));
  }
  w.set("general.file_type", GgufValue::u32(ft->ftype_id));
  w.set("general.quantization_version", GgufValue::u32(2));
  for (const GgufKeyValue& kv : vocab->metadata()) {
    if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
  }

  ThreadPool pool(o.threads);
  uint64_t tensor_index = 0;
  // Values: N(0, std) (normal), or a constant, or Mamba's A initialisation (row r: -(1..ne0)).
  enum class Fill { kNormal, kConstant, kMambaA };
  auto add_filled = [&](const std::string& name, GgmlType type, int64_t ne0, int64_t ne1, Fill fill,
                        float value) -> Status {
    const uint64_t key = mix64(o.seed) ^ mix64(++tensor_index << 32);
    std::vector<uint64_t> ne = {static_cast<uint64_t>(ne0)};
    if (ne1 > 1) ne.push_back(static_cast<uint64_t>(ne1));
    const float stddev = o.weight_std;
    return w.add_tensor_deferred(
        name, type, ne, [&pool, key, type, ne0, ne1, fill, value, stddev](std::span<uint8_t> out) {
          const uint64_t row_bytes = out.size() / static_cast<uint64_t>(ne1);
          std::atomic<bool> ok{true};
          pool.parallel_for(static_cast<size_t>(ne1), [&](size_t b, size_t e, int) {
            std::vector<float> row(static_cast<size_t>(ne0));
            for (size_t r = b; r < e; ++r) {
              if (fill == Fill::kConstant) {
                std::fill(row.begin(), row.end(), value);
              } else if (fill == Fill::kMambaA) {
                for (int64_t i = 0; i < ne0; ++i) row[static_cast<size_t>(i)] = -float(i + 1);
              } else {
                fill_normal(key + (static_cast<uint64_t>(r) << 24), stddev, row.data(), ne0);
              }
              if (!quantize_row(type, row.data(), out.data() + r * row_bytes, ne0).ok()) ok = false;
            }
          });
          if (!ok) return Status(StatusCode::kInternal, "quantize_row failed");
          return Status();
        });
  };
  auto add = [&](const std::string& name, GgmlType type, int64_t ne0, int64_t ne1,
                 bool ones) -> Status {
    return add_filled(name, type, ne0, ne1, ones ? Fill::kConstant : Fill::kNormal, 1.0f);
  };

  const GgmlType base = ft->base;
  const GgmlType out_type =
      (base == GgmlType::Q8_0 || base == GgmlType::F16 || base == GgmlType::F32) ? base
                                                                                 : GgmlType::Q6_K;
  if (is_mamba) {
    const GgmlType f32 = GgmlType::F32;
    POWER_RETURN_IF_ERROR(add("token_embd.weight", base, s.n_embd, s.n_vocab, false));
    for (int64_t l = 0; l < s.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      POWER_RETURN_IF_ERROR(add(p + "attn_norm.weight", f32, s.n_embd, 1, true));
      POWER_RETURN_IF_ERROR(add(p + "ssm_in.weight", base, s.n_embd, 2 * s.d_inner, false));
      POWER_RETURN_IF_ERROR(add(p + "ssm_conv1d.weight", f32, s.d_conv, s.d_inner, false));
      POWER_RETURN_IF_ERROR(
          add_filled(p + "ssm_conv1d.bias", f32, s.d_inner, 1, Fill::kConstant, 0.0f));
      POWER_RETURN_IF_ERROR(
          add(p + "ssm_x.weight", base, s.d_inner, s.dt_rank + 2 * s.d_state, false));
      POWER_RETURN_IF_ERROR(add(p + "ssm_dt.weight", f32, s.dt_rank, s.d_inner, false));
      POWER_RETURN_IF_ERROR(
          add_filled(p + "ssm_dt.bias", f32, s.d_inner, 1, Fill::kConstant, -3.0f));
      POWER_RETURN_IF_ERROR(
          add_filled(p + "ssm_a", f32, s.d_state, s.d_inner, Fill::kMambaA, 0.0f));
      POWER_RETURN_IF_ERROR(add(p + "ssm_d", f32, s.d_inner, 1, true));
      POWER_RETURN_IF_ERROR(add(p + "ssm_out.weight", base, s.d_inner, s.n_embd, false));
    }
    POWER_RETURN_IF_ERROR(add("output_norm.weight", f32, s.n_embd, 1, true));
    POWER_RETURN_IF_ERROR(add("output.weight", out_type, s.n_embd, s.n_vocab, false));
    POWER_RETURN_IF_ERROR(w.write(o.out));
    std::fprintf(stderr, "wrote %s: mamba %s, %s, seed %llu\n", o.out.c_str(), s.name, ft->name,
                 static_cast<unsigned long long>(o.seed));
    return Status();
  }

  const int64_t hd = s.n_embd / s.n_head;
  POWER_RETURN_IF_ERROR(add("token_embd.weight", base, s.n_embd, s.n_vocab, false));
  // Main layers, then the MTP layers (llama.cpp's NextN layout: an ordinary block plus
  // nextn.eh_proj / enorm / hnorm / shared_head_norm; embed_tokens and shared_head_head are
  // left out, so the MTP head shares the main model's, as the nextn package allows).
  for (int64_t l = 0; l < s.n_layer + o.mtp; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    // llama-quantize's use_more_bits(i, n) for Q4_K_M.
    const int64_t n8 = s.n_layer / 8;
    const bool more = ft->k_m && (l < n8 || l >= 7 * s.n_layer / 8 || (l - n8) % 3 == 2);
    const GgmlType vd = more ? GgmlType::Q6_K : base;
    POWER_RETURN_IF_ERROR(add(p + "attn_norm.weight", GgmlType::F32, s.n_embd, 1, true));
    POWER_RETURN_IF_ERROR(add(p + "attn_q.weight", base, s.n_embd, s.n_head * hd, false));
    POWER_RETURN_IF_ERROR(add(p + "attn_k.weight", base, s.n_embd, s.n_head_kv * hd, false));
    POWER_RETURN_IF_ERROR(add(p + "attn_v.weight", vd, s.n_embd, s.n_head_kv * hd, false));
    POWER_RETURN_IF_ERROR(add(p + "attn_output.weight", base, s.n_head * hd, s.n_embd, false));
    POWER_RETURN_IF_ERROR(add(p + "ffn_norm.weight", GgmlType::F32, s.n_embd, 1, true));
    POWER_RETURN_IF_ERROR(add(p + "ffn_gate.weight", base, s.n_embd, s.n_ff, false));
    POWER_RETURN_IF_ERROR(add(p + "ffn_up.weight", base, s.n_embd, s.n_ff, false));
    POWER_RETURN_IF_ERROR(add(p + "ffn_down.weight", vd, s.n_ff, s.n_embd, false));
    if (l >= s.n_layer) {
      POWER_RETURN_IF_ERROR(add(p + "nextn.eh_proj.weight", base, 2 * s.n_embd, s.n_embd, false));
      POWER_RETURN_IF_ERROR(add(p + "nextn.enorm.weight", GgmlType::F32, s.n_embd, 1, true));
      POWER_RETURN_IF_ERROR(add(p + "nextn.hnorm.weight", GgmlType::F32, s.n_embd, 1, true));
      POWER_RETURN_IF_ERROR(
          add(p + "nextn.shared_head_norm.weight", GgmlType::F32, s.n_embd, 1, true));
    }
  }
  POWER_RETURN_IF_ERROR(add("output_norm.weight", GgmlType::F32, s.n_embd, 1, true));
  POWER_RETURN_IF_ERROR(add("output.weight", out_type, s.n_embd, s.n_vocab, false));
  POWER_RETURN_IF_ERROR(w.write(o.out));
  std::fprintf(stderr, "wrote %s: llama %s, %s, seed %llu%s\n", o.out.c_str(), s.name, ft->name,
               static_cast<unsigned long long>(o.seed),
               o.mtp > 0 ? (", " + std::to_string(o.mtp) + " MTP layer(s)").c_str() : "");
  return Status();
}

}  // namespace

void add_dev_commands(CLI::App& app) {
  static SynthOptions o;
  auto* dev = app.add_subcommand("dev", "Developer tools");
  dev->require_subcommand(1);
  auto* sy = dev->add_subcommand("synth",
                                 "Write a seeded random-weight llama or Mamba model (benchmarks)");
  sy->add_option("--shape", o.shape, "tinyllama-1.1b, 134m, tiny or mamba-130m");
  sy->add_option("--type", o.type, "q4_0, q8_0, q4_k, q4_k_m, q6_k, f16 or f32");
  sy->add_option("--vocab", o.vocab, "Vocab-only GGUF to copy tokenizer.* from (llama-spm)")
      ->required();
  sy->add_option("-o,--out", o.out, "Output GGUF file")->required();
  sy->add_option("--seed", o.seed, "Seed (same seed, same file)");
  sy->add_option("--std", o.weight_std, "Standard deviation of the weights");
  sy->add_option("--mtp", o.mtp,
                 "Append N synthetic MTP (NextN) layers, llama.cpp's layout (speculative 'mtp')");
  sy->add_option("-t,--threads", o.threads, "Threads for quantization (0 = all cores)");
  sy->callback([] {
    Status st = synth(o);
    if (!st.ok()) report_error(st);
  });
}

}  // namespace power::cli
