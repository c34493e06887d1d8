#include "format/llama2c.h"

#include <cctype>
#include <cstring>
#include <vector>

#include "base/checked.h"
#include "base/file.h"
#include "format/gguf.h"

namespace power {
namespace {

constexpr int32_t kMaxDim = 1 << 20;

Status corrupt(const std::string& path, const std::string& what, uint64_t offset) {
  return Status(StatusCode::kCorrupt, what).with("path", path).with("offset", offset);
}

// Reads little-endian values from a mapping with bounds checks.
class Reader {
 public:
  Reader(const MappedFile& m) : m_(m) {}
  bool i32(int32_t* v) { return bytes(v, 4); }
  bool f32(float* v) { return bytes(v, 4); }
  bool bytes(void* dst, uint64_t n) {
    if (n > m_.size() - pos_) return false;
    if (n > 0) std::memcpy(dst, m_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  const uint8_t* take(uint64_t n) {
    if (n > m_.size() - pos_) return nullptr;
    const uint8_t* p = m_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return m_.size() - pos_; }

 private:
  const MappedFile& m_;
  uint64_t pos_ = 0;
};

std::string escape_spaces(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ' ') {
      out += "\xe2\x96\x81";
    } else {
      out += c;
    }
  }
  return out;
}

bool is_byte_piece(const std::string& s) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return false;
  return std::isxdigit(static_cast<unsigned char>(s[3])) &&
         std::isxdigit(static_cast<unsigned char>(s[4]));
}

}  // namespace

Result<Llama2cConvertStats> convert_llama2c(const std::string& model_path,
                                            const std::string& tokenizer_path,
                                            const std::string& out_path) {
  POWER_ASSIGN_OR_RETURN(MappedFile model, MappedFile::open(model_path, AccessHint::kSequential));
  Reader r(model);
  int32_t h[7];
  for (int32_t& v : h) {
    if (!r.i32(&v)) return corrupt(model_path, "truncated llama2.c header", r.pos());
  }
  Llama2cConvertStats s;
  s.dim = h[0];
  s.hidden_dim = h[1];
  s.n_layers = h[2];
  s.n_heads = h[3];
  s.n_kv_heads = h[4];
  s.shared_classifier = h[5] > 0;
  s.vocab_size = h[5] > 0 ? h[5] : -h[5];
  s.seq_len = h[6];
  for (int i = 0; i < 7; ++i) {
    if (h[i] == 0 || (i != 5 && h[i] < 0) || h[i] > kMaxDim || h[i] < -kMaxDim) {
      return corrupt(model_path, "llama2.c header value out of range", 4u * i);
    }
  }
  if (s.n_layers > 4096 || s.n_heads > 4096) {
    return corrupt(model_path, "llama2.c header value out of range", 8);
  }
  if (s.dim % s.n_heads != 0 || s.n_kv_heads > s.n_heads || s.n_heads % s.n_kv_heads != 0) {
    return corrupt(model_path, "inconsistent head counts in the llama2.c header", 0);
  }
  const uint64_t dim = s.dim, ff = s.hidden_dim, L = s.n_layers, V = s.vocab_size;
  const uint64_t head = dim / s.n_heads, kv_dim = head * s.n_kv_heads;
  const uint64_t floats = V * dim + L * dim + L * dim * dim + 2 * L * dim * kv_dim + L * dim * dim +
                          L * dim + 3 * L * dim * ff + dim +
                          static_cast<uint64_t>(s.seq_len) * head +
                          (s.shared_classifier ? 0 : V * dim);
  if (floats * 4 != r.remaining()) {
    return Status(StatusCode::kCorrupt, "llama2.c checkpoint size does not match its header")
        .with("path", model_path)
        .with("expected_bytes", 28 + floats * 4)
        .with("actual_bytes", model.size());
  }

  // Tokenizer.
  POWER_ASSIGN_OR_RETURN(MappedFile tok_file, MappedFile::open(tokenizer_path));
  Reader tr(tok_file);
  int32_t max_len = 0;
  if (!tr.i32(&max_len)) return corrupt(tokenizer_path, "truncated tokenizer header", 0);
  std::vector<GgufValue> tokens, scores, types;
  for (uint64_t id = 0; id < V; ++id) {
    float score;
    int32_t len;
    if (!tr.f32(&score) || !tr.i32(&len)) {
      return corrupt(tokenizer_path, "truncated tokenizer entry", tr.pos()).with("token", id);
    }
    if (len < 0 || static_cast<uint64_t>(len) > tr.remaining()) {
      return corrupt(tokenizer_path, "token length out of range", tr.pos()).with("token", id);
    }
    std::string text(static_cast<size_t>(len), '\0');
    tr.bytes(text.data(), static_cast<uint64_t>(len));
    int32_t type = 1;  // normal
    if (id == 0) {
      text = "<unk>";
      type = 2;
    } else if (id == 1) {
      text = "<s>";
      type = 3;
    } else if (id == 2) {
      text = "</s>";
      type = 3;
    } else if (text.empty()) {
      type = 3;
    } else if (is_byte_piece(text)) {
      type = 6;
    }
    tokens.push_back(GgufValue::str(escape_spaces(text)));
    scores.push_back(GgufValue::f32(score));
    types.push_back(GgufValue::i32(type));
  }
  if (tr.remaining() != 0) {
    return corrupt(tokenizer_path, "tokenizer has bytes after the last token", tr.pos())
        .with("vocab_size", V);
  }

  GgufWriter w;
  w.set("tokenizer.ggml.tokens", GgufValue::array(GgufValueType::kString, std::move(tokens)));
  w.set("tokenizer.ggml.scores", GgufValue::array(GgufValueType::kFloat32, std::move(scores)));
  w.set("tokenizer.ggml.token_type", GgufValue::array(GgufValueType::kInt32, std::move(types)));
  w.set("tokenizer.ggml.model", GgufValue::str("llama"));
  w.set("general.architecture", GgufValue::str("llama"));
  w.set("general.name", GgufValue::str("llama"));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(0));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  w.set("tokenizer.ggml.seperator_token_id", GgufValue::u32(0xffffffffu));
  w.set("tokenizer.ggml.padding_token_id", GgufValue::u32(0xffffffffu));
  w.set("llama.context_length", GgufValue::u32(static_cast<uint32_t>(s.seq_len)));
  w.set("llama.embedding_length", GgufValue::u32(static_cast<uint32_t>(dim)));
  w.set("llama.feed_forward_length", GgufValue::u32(static_cast<uint32_t>(ff)));
  w.set("llama.attention.head_count", GgufValue::u32(static_cast<uint32_t>(s.n_heads)));
  w.set("llama.attention.head_count_kv", GgufValue::u32(static_cast<uint32_t>(s.n_kv_heads)));
  w.set("llama.block_count", GgufValue::u32(static_cast<uint32_t>(L)));
  w.set("llama.rope.dimension_count", GgufValue::u32(static_cast<uint32_t>(head)));
  w.set("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));

  // Weights in run.c's order; each matrix is [out][in] row-major, which is ggml's
  // ne = {in, out}. The tensors are added in the peer's order after reading them all.
  auto take = [&](uint64_t n) { return r.take(n * 4); };  // sizes were checked above
  const uint8_t* emb = take(V * dim);
  const uint8_t* rms_att = take(L * dim);
  const uint8_t* wq = take(L * dim * dim);
  const uint8_t* wk = take(L * dim * kv_dim);
  const uint8_t* wv = take(L * dim * kv_dim);
  const uint8_t* wo = take(L * dim * dim);
  const uint8_t* rms_ffn = take(L * dim);
  const uint8_t* w1 = take(L * dim * ff);
  const uint8_t* w2 = take(L * ff * dim);
  const uint8_t* w3 = take(L * dim * ff);
  const uint8_t* rms_final = take(dim);
  take(static_cast<uint64_t>(s.seq_len) * head);  // freq_cis_real + freq_cis_imag (unused)
  const uint8_t* wcls = s.shared_classifier ? emb : take(V * dim);

  auto add = [&](const std::string& name, std::vector<uint64_t> ne, const uint8_t* p) -> Status {
    uint64_t n = 1;
    for (uint64_t x : ne) n *= x;
    return w.add_tensor(name, GgmlType::F32, std::move(ne), std::vector<uint8_t>(p, p + n * 4));
  };
  POWER_RETURN_IF_ERROR(add("token_embd.weight", {dim, V}, emb));
  POWER_RETURN_IF_ERROR(add("output_norm.weight", {dim}, rms_final));
  POWER_RETURN_IF_ERROR(add("output.weight", {dim, V}, wcls));
  for (uint64_t i = 0; i < L; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    POWER_RETURN_IF_ERROR(add(b + "attn_q.weight", {dim, dim}, wq + i * dim * dim * 4));
    POWER_RETURN_IF_ERROR(add(b + "attn_k.weight", {dim, kv_dim}, wk + i * dim * kv_dim * 4));
    POWER_RETURN_IF_ERROR(add(b + "attn_v.weight", {dim, kv_dim}, wv + i * dim * kv_dim * 4));
    POWER_RETURN_IF_ERROR(add(b + "attn_output.weight", {dim, dim}, wo + i * dim * dim * 4));
    POWER_RETURN_IF_ERROR(add(b + "attn_norm.weight", {dim}, rms_att + i * dim * 4));
    POWER_RETURN_IF_ERROR(add(b + "ffn_gate.weight", {dim, ff}, w1 + i * dim * ff * 4));
    POWER_RETURN_IF_ERROR(add(b + "ffn_down.weight", {ff, dim}, w2 + i * ff * dim * 4));
    POWER_RETURN_IF_ERROR(add(b + "ffn_up.weight", {dim, ff}, w3 + i * dim * ff * 4));
    POWER_RETURN_IF_ERROR(add(b + "ffn_norm.weight", {dim}, rms_ffn + i * dim * 4));
  }
  POWER_RETURN_IF_ERROR(w.write(out_path));
  return s;
}

}  // namespace power
