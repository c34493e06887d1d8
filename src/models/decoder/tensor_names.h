// GGUF tensor names of the decoder architectures: the one table (llama.cpp's naming).
// Per-layer names are "blk.<i>.<suffix>".
#pragma once

#include <string>

namespace power::models::tensor_names {

inline constexpr const char* kTokenEmbd = "token_embd.weight";
inline constexpr const char* kOutputNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";
inline constexpr const char* kRopeFreqs = "rope_freqs.weight";

inline constexpr const char* kAttnNorm = "attn_norm.weight";
inline constexpr const char* kAttnQ = "attn_q.weight";
inline constexpr const char* kAttnK = "attn_k.weight";
inline constexpr const char* kAttnV = "attn_v.weight";
inline constexpr const char* kAttnQkv = "attn_qkv.weight";
inline constexpr const char* kAttnOut = "attn_output.weight";
inline constexpr const char* kAttnQBias = "attn_q.bias";
inline constexpr const char* kAttnKBias = "attn_k.bias";
inline constexpr const char* kAttnVBias = "attn_v.bias";
inline constexpr const char* kAttnOutBias = "attn_output.bias";
inline constexpr const char* kAttnQNorm = "attn_q_norm.weight";
inline constexpr const char* kAttnKNorm = "attn_k_norm.weight";
inline constexpr const char* kFfnNorm = "ffn_norm.weight";
inline constexpr const char* kFfnGate = "ffn_gate.weight";
inline constexpr const char* kFfnUp = "ffn_up.weight";
inline constexpr const char* kFfnDown = "ffn_down.weight";

inline std::string layer(int64_t i, const char* suffix) {
  return "blk." + std::to_string(i) + "." + suffix;
}

}  // namespace power::models::tensor_names
