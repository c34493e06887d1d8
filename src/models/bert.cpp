#include "models/bert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "models/weights.h"
#include "tensor/quant.h"

namespace power {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;
// Rows of a quantized matrix decoded to f32 at a time (then multiplied by the float kernel).
constexpr int64_t kWeightTileRows = 128;

Result<int64_t> meta_int(const GgufFile& f, const std::string& key, bool required, int64_t def,
                         int64_t lo, int64_t hi) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (!required) return def;
    return Status(StatusCode::kNotFound, "missing metadata key").with("key", key);
  }
  auto x = v->as_i64();
  if (!x || *x < lo || *x > hi) {
    return Status(StatusCode::kInvalidArgument, "metadata value out of range")
        .with("key", key)
        .with("min", lo)
        .with("max", hi);
  }
  return *x;
}

std::vector<float> to_f32(const TensorView& view) {
  if (view.data == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(view.n_elements()));
  for (int64_t r = 0; r < view.n_rows(); ++r) matrix_row_f32(view, r, out.data() + r * view.ne[0]);
  return out;
}

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// The tanh form of GELU (ggml_gelu; the peer's BERT FFN activation), in double.
float gelu_tanh(float u) {
  constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;
  const double x = u;
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))));
}

}  // namespace

const char* pooling_name(PoolingType p) {
  switch (p) {
    case PoolingType::kNone:
      return "none";
    case PoolingType::kMean:
      return "mean";
    case PoolingType::kCls:
      return "cls";
    case PoolingType::kLast:
      return "last";
  }
  return "?";
}

void l2_normalize(float* v, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(v[i]) * v[i];
  if (sum <= 0.0) return;
  const auto scale = static_cast<float>(1.0 / std::sqrt(sum));
  for (int64_t i = 0; i < n; ++i) v[i] *= scale;
}

Result<PoolingType> parse_pooling(std::string_view name) {
  for (PoolingType p :
       {PoolingType::kNone, PoolingType::kMean, PoolingType::kCls, PoolingType::kLast}) {
    if (name == pooling_name(p)) return p;
  }
  return Status(StatusCode::kInvalidArgument, "unknown pooling (none, mean, cls, last)")
      .with("pooling", name);
}

EncoderWorkspace::EncoderWorkspace(const BertHparams& hp, int64_t max_tokens, int n_threads)
    : cpu_(n_threads, std::max(hp.n_embd, hp.n_ff), std::max<int64_t>(hp.n_ctx_train, 1)),
      max_tokens_(max_tokens) {
  auto rows = [&](int64_t width) {
    return std::vector<float>(static_cast<size_t>(max_tokens * width));
  };
  x_ = rows(hp.n_embd);
  h_ = rows(hp.n_embd);
  q_ = rows(hp.n_embd);
  k_ = rows(hp.n_embd);
  v_ = rows(hp.n_embd);
  attn_ = rows(hp.n_embd);
  ff_ = rows(hp.n_ff);
  wtile_.resize(static_cast<size_t>(kWeightTileRows * std::max(hp.n_embd, hp.n_ff)));
}

uint64_t EncoderWorkspace::planned_bytes(const BertHparams& hp, int64_t max_tokens, int n_threads) {
  const auto t = static_cast<uint64_t>(max_tokens);
  const uint64_t floats = t * static_cast<uint64_t>(6 * hp.n_embd + hp.n_ff) +
                          static_cast<uint64_t>(kWeightTileRows * std::max(hp.n_embd, hp.n_ff));
  // Per-thread scratch: a decoded weight row, an attention span, a score row per thread.
  const uint64_t threads = static_cast<uint64_t>(std::max(n_threads, 1));
  const uint64_t scratch =
      threads * static_cast<uint64_t>(std::max(hp.n_embd, hp.n_ff) + 2 * hp.n_ctx_train);
  return (floats + scratch) * sizeof(float);
}

uint64_t EncoderWorkspace::bytes() const {
  const uint64_t floats = x_.size() + h_.size() + q_.size() + k_.size() + v_.size() + attn_.size() +
                          ff_.size() + wtile_.size();
  return floats * sizeof(float) + cpu_.scratch_bytes();
}

Result<std::unique_ptr<BertModel>> BertModel::load(std::shared_ptr<const GgufFile> file) {
  const GgufFile& f = *file;
  POWER_ASSIGN_OR_RETURN(std::string arch, f.get_string("general.architecture"));
  if (arch != "bert") {
    return Status(StatusCode::kUnsupported, "not a BERT encoder").with("architecture", arch);
  }
  std::unique_ptr<BertModel> m(new BertModel());
  BertHparams& hp = m->hp_;
  POWER_ASSIGN_OR_RETURN(hp.n_embd, meta_int(f, "bert.embedding_length", true, 0, 1, kMaxDim));
  POWER_ASSIGN_OR_RETURN(hp.n_layer, meta_int(f, "bert.block_count", true, 0, 1, 4096));
  POWER_ASSIGN_OR_RETURN(hp.n_ff, meta_int(f, "bert.feed_forward_length", true, 0, 1, kMaxDim));
  POWER_ASSIGN_OR_RETURN(hp.n_head, meta_int(f, "bert.attention.head_count", true, 0, 1, 65536));
  POWER_ASSIGN_OR_RETURN(int64_t n_head_kv,
                         meta_int(f, "bert.attention.head_count_kv", false, hp.n_head, 1, 65536));
  if (n_head_kv != hp.n_head) {
    return Status(StatusCode::kUnsupported, "BERT with grouped key/value heads")
        .with("head_count", hp.n_head)
        .with("head_count_kv", n_head_kv);
  }
  if (hp.n_embd % hp.n_head != 0) {
    return Status(StatusCode::kInvalidArgument, "embedding_length is not a multiple of heads")
        .with("embedding_length", hp.n_embd)
        .with("head_count", hp.n_head);
  }
  hp.head_dim = hp.n_embd / hp.n_head;
  POWER_ASSIGN_OR_RETURN(hp.n_ctx_train,
                         meta_int(f, "bert.context_length", true, 0, 1, int64_t{1} << 20));
  POWER_ASSIGN_OR_RETURN(int64_t pooling, meta_int(f, "bert.pooling_type", false, 0, 0, 1000));
  if (pooling > 3) {
    return Status(StatusCode::kUnsupported, "pooling type is not supported (0..3)")
        .with("key", "bert.pooling_type")
        .with("value", pooling);
  }
  hp.pooling = static_cast<PoolingType>(pooling);
  if (const GgufValue* v = f.find("bert.attention.layer_norm_epsilon")) {
    auto e = v->as_f64();
    if (!e || !(*e > 0.0 && *e < 1.0)) {
      return Status(StatusCode::kInvalidArgument, "metadata value out of range")
          .with("key", "bert.attention.layer_norm_epsilon");
    }
    hp.eps = static_cast<float>(*e);
  } else {
    return Status(StatusCode::kNotFound, "missing metadata key")
        .with("key", "bert.attention.layer_norm_epsilon");
  }
  if (const GgufValue* v = f.find("bert.attention.causal")) {
    if (v->as_bool().value_or(false)) {
      return Status(StatusCode::kUnsupported, "causal BERT attention is not supported")
          .with("key", "bert.attention.causal");
    }
  }
  const GgufTensor* te = f.find_tensor("token_embd.weight");
  if (te == nullptr) {
    return Status(StatusCode::kNotFound, "missing required tensor")
        .with("tensor", "token_embd.weight");
  }
  if (te->ne.size() < 2 || te->ne[0] != static_cast<uint64_t>(hp.n_embd) || te->ne[1] < 1 ||
      te->ne[1] > static_cast<uint64_t>(INT32_MAX)) {
    return Status(StatusCode::kInvalidArgument, "tensor has the wrong shape")
        .with("tensor", "token_embd.weight")
        .with("n_embd", hp.n_embd);
  }
  hp.n_vocab = static_cast<int64_t>(te->ne[1]);
  const GgufTensor* tt = f.find_tensor("token_types.weight");
  hp.n_token_types = 1;
  if (tt != nullptr && tt->ne.size() >= 2 && tt->ne[0] == static_cast<uint64_t>(hp.n_embd) &&
      tt->ne[1] >= 1 && tt->ne[1] <= 1024) {
    hp.n_token_types = static_cast<int64_t>(tt->ne[1]);
  }

  const int64_t E = hp.n_embd, F = hp.n_ff;
  WeightBinder b(f);
  m->token_embd_ = b.require("token_embd.weight", {E, hp.n_vocab});
  TensorView types = b.require("token_types.weight", {E, hp.n_token_types});
  TensorView pos = b.require("position_embd.weight", {E, hp.n_ctx_train});
  TensorView en_w = b.require("token_embd_norm.weight", {E});
  TensorView en_b = b.require("token_embd_norm.bias", {E});
  struct Views {
    TensorView bq, bk, bv, bo, b_up, b_down, an_w, an_b, on_w, on_b;
  };
  std::vector<Views> views(static_cast<size_t>(hp.n_layer));
  m->layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t i = 0; i < hp.n_layer; ++i) {
    auto name = [i](const char* s) { return "blk." + std::to_string(i) + "." + s; };
    Layer& L = m->layers_[static_cast<size_t>(i)];
    Views& V = views[static_cast<size_t>(i)];
    L.wq = b.require(name("attn_q.weight"), {E, E});
    L.wk = b.require(name("attn_k.weight"), {E, E});
    L.wv = b.require(name("attn_v.weight"), {E, E});
    L.wo = b.require(name("attn_output.weight"), {E, E});
    V.bq = b.require(name("attn_q.bias"), {E});
    V.bk = b.require(name("attn_k.bias"), {E});
    V.bv = b.require(name("attn_v.bias"), {E});
    V.bo = b.require(name("attn_output.bias"), {E});
    V.an_w = b.require(name("attn_output_norm.weight"), {E});
    V.an_b = b.require(name("attn_output_norm.bias"), {E});
    L.w_up = b.require(name("ffn_up.weight"), {E, F});
    V.b_up = b.require(name("ffn_up.bias"), {F});
    L.w_down = b.require(name("ffn_down.weight"), {F, E});
    V.b_down = b.require(name("ffn_down.bias"), {E});
    V.on_w = b.require(name("layer_output_norm.weight"), {E});
    V.on_b = b.require(name("layer_output_norm.bias"), {E});
  }
  POWER_RETURN_IF_ERROR(b.finish());
  m->token_type0_ = to_f32(types);
  m->token_type0_.resize(static_cast<size_t>(E));  // row 0: the only token type used
  m->position_embd_ = to_f32(pos);
  m->embd_norm_w_ = to_f32(en_w);
  m->embd_norm_b_ = to_f32(en_b);
  for (size_t i = 0; i < views.size(); ++i) {
    Layer& L = m->layers_[i];
    const Views& V = views[i];
    L.bq = to_f32(V.bq);
    L.bk = to_f32(V.bk);
    L.bv = to_f32(V.bv);
    L.bo = to_f32(V.bo);
    L.b_up = to_f32(V.b_up);
    L.b_down = to_f32(V.b_down);
    L.attn_norm_w = to_f32(V.an_w);
    L.attn_norm_b = to_f32(V.an_b);
    L.out_norm_w = to_f32(V.on_w);
    L.out_norm_b = to_f32(V.on_b);
  }
  m->file_ = std::move(file);
  return m;
}

Result<std::unique_ptr<EncoderWorkspace>> BertModel::make_workspace(int64_t max_tokens,
                                                                    int n_threads) const {
  if (max_tokens <= 0) {
    return Status(StatusCode::kInvalidArgument, "workspace size must be positive")
        .with("max_tokens", max_tokens);
  }
  return std::make_unique<EncoderWorkspace>(hp_, max_tokens, n_threads);
}

int64_t BertModel::output_rows(std::span<const std::span<const int32_t>> seqs,
                               PoolingType pooling) {
  if (pooling != PoolingType::kNone) return static_cast<int64_t>(seqs.size());
  int64_t n = 0;
  for (const auto& s : seqs) n += static_cast<int64_t>(s.size());
  return n;
}

// out[t] = W x[t] + bias. Float matrices: the kernels' float path (f32 activations). Quantized
// matrices: tiles of kWeightTileRows rows are decoded to f32 (in parallel) and multiplied with
// the same float path, so activations are never quantized. In the float kernel the arithmetic
// of one (row, token) dot product does not depend on the number of tokens or the tiling.
void BertModel::linear(EncoderWorkspace& ws, const TensorView& w, const std::vector<float>& bias,
                       const float* in, float* out, int64_t n_tokens) const {
  const int64_t k = w.ne[0], rows = w.ne[1];
  if (is_float_type(w.type)) {
    matmul(ws.cpu_, w, in, k, n_tokens, out, rows);
  } else {
    float* tile = ws.wtile_.data();
    for (int64_t r0 = 0; r0 < rows; r0 += kWeightTileRows) {
      const int64_t n = std::min(kWeightTileRows, rows - r0);
      ws.cpu_.pool().parallel_for(static_cast<size_t>(n), [&](size_t begin, size_t end, int) {
        for (size_t r = begin; r < end; ++r) {
          matrix_row_f32(w, r0 + static_cast<int64_t>(r), tile + static_cast<int64_t>(r) * k);
        }
      });
      const int64_t shape[2] = {k, n};
      auto view = TensorView::contiguous(GgmlType::F32, shape, tile,
                                         static_cast<uint64_t>(n * k) * sizeof(float));
      POWER_CHECK(view.ok());
      matmul(ws.cpu_, *view, in, k, n_tokens, out + r0, rows);
    }
  }
  if (!bias.empty()) {
    for (int64_t t = 0; t < n_tokens; ++t) add_inplace(out + t * rows, bias.data(), rows);
  }
}

// x[t] = (x[t] - mean) / sqrt(var + eps) * w + b per row, mean and (biased) variance in double.
void BertModel::layer_norm_rows(EncoderWorkspace& ws, float* x, const std::vector<float>& w,
                                const std::vector<float>& b, int64_t n_tokens) const {
  const int64_t n = hp_.n_embd;
  const double eps = hp_.eps;
  ws.cpu_.pool().parallel_for(static_cast<size_t>(n_tokens), [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      float* row = x + static_cast<int64_t>(t) * n;
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += row[i];
      const double mean = sum / static_cast<double>(n);
      double var = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double d = row[i] - mean;
        var += d * d;
      }
      var /= static_cast<double>(n);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < n; ++i) {
        row[i] = static_cast<float>((row[i] - mean) * inv * w[static_cast<size_t>(i)] +
                                    b[static_cast<size_t>(i)]);
      }
    }
  });
}

// Bidirectional attention: each (sequence, head, query) attends over all of its sequence's
// tokens. Work items are (sequence, head) pairs; scores live in the thread's span scratch.
void BertModel::attention(EncoderWorkspace& ws,
                          std::span<const std::span<const int32_t>> seqs) const {
  const int64_t E = hp_.n_embd, hd = hp_.head_dim, H = hp_.n_head;
  std::vector<int64_t> start(seqs.size() + 1, 0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    start[s + 1] = start[s] + static_cast<int64_t>(seqs[s].size());
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t items = seqs.size() * static_cast<size_t>(H);
  ws.cpu_.pool().parallel_for(items, [&](size_t begin, size_t end, int thread) {
    float* scores = ws.cpu_.span_scratch(thread);
    for (size_t item = begin; item < end; ++item) {
      const size_t s = item / static_cast<size_t>(H);
      const int64_t h = static_cast<int64_t>(item % static_cast<size_t>(H));
      const int64_t t0 = start[s], n = start[s + 1] - start[s];
      for (int64_t i = 0; i < n; ++i) {
        const float* q = ws.q_.data() + (t0 + i) * E + h * hd;
        for (int64_t j = 0; j < n; ++j) {
          scores[j] = dot_f32(q, ws.k_.data() + (t0 + j) * E + h * hd, hd) * scale;
        }
        softmax(scores, n);
        float* o = ws.attn_.data() + (t0 + i) * E + h * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          const float* v = ws.v_.data() + (t0 + j) * E + h * hd;
          const float p = scores[j];
          for (int64_t d = 0; d < hd; ++d) o[d] += p * v[d];
        }
      }
    }
  });
}

Status BertModel::encode(EncoderWorkspace& ws, std::span<const std::span<const int32_t>> seqs,
                         PoolingType pooling, float* out) const {
  const int64_t E = hp_.n_embd, F = hp_.n_ff;
  int64_t total = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto n = static_cast<int64_t>(seqs[s].size());
    if (n == 0) {
      return Status(StatusCode::kInvalidArgument, "empty input sequence").with("input", s);
    }
    if (n > hp_.n_ctx_train) {
      return Status(StatusCode::kOutOfRange, "input is longer than the model's context")
          .with("input", s)
          .with("tokens", n)
          .with("n_ctx", hp_.n_ctx_train);
    }
    for (int32_t id : seqs[s]) {
      if (id < 0 || id >= hp_.n_vocab) {
        return Status(StatusCode::kInvalidArgument, "token id out of range")
            .with("input", s)
            .with("token", id)
            .with("n_vocab", hp_.n_vocab);
      }
    }
    total += n;
  }
  if (seqs.empty()) return Status();
  if (total > ws.max_tokens_) {
    return Status(StatusCode::kOutOfRange, "batch exceeds the workspace's maximum tokens")
        .with("tokens", total)
        .with("max", ws.max_tokens_);
  }
  // Embeddings.
  float* x = ws.x_.data();
  {
    int64_t t = 0;
    for (const auto& seq : seqs) {
      for (size_t i = 0; i < seq.size(); ++i, ++t) {
        float* row = x + t * E;
        matrix_row_f32(token_embd_, seq[i], row);
        const float* p = position_embd_.data() + static_cast<int64_t>(i) * E;
        for (int64_t e = 0; e < E; ++e) {
          row[e] = row[e] + token_type0_[static_cast<size_t>(e)] + p[e];
        }
      }
    }
  }
  layer_norm_rows(ws, x, embd_norm_w_, embd_norm_b_, total);
  float* hbuf = ws.h_.data();
  for (const Layer& L : layers_) {
    linear(ws, L.wq, L.bq, x, ws.q_.data(), total);
    linear(ws, L.wk, L.bk, x, ws.k_.data(), total);
    linear(ws, L.wv, L.bv, x, ws.v_.data(), total);
    attention(ws, seqs);
    linear(ws, L.wo, L.bo, ws.attn_.data(), hbuf, total);
    for (int64_t t = 0; t < total; ++t) add_inplace(hbuf + t * E, x + t * E, E);
    layer_norm_rows(ws, hbuf, L.attn_norm_w, L.attn_norm_b, total);
    linear(ws, L.w_up, L.b_up, hbuf, ws.ff_.data(), total);
    float* ff = ws.ff_.data();
    ws.cpu_.pool().parallel_for(static_cast<size_t>(total), [&](size_t begin, size_t end, int) {
      for (size_t i = begin * static_cast<size_t>(F); i < end * static_cast<size_t>(F); ++i) {
        ff[i] = gelu_tanh(ff[i]);
      }
    });
    linear(ws, L.w_down, L.b_down, ff, x, total);
    for (int64_t t = 0; t < total; ++t) add_inplace(x + t * E, hbuf + t * E, E);
    layer_norm_rows(ws, x, L.out_norm_w, L.out_norm_b, total);
  }
  // Pooling.
  int64_t t0 = 0;
  int64_t row = 0;
  for (const auto& seq : seqs) {
    const auto n = static_cast<int64_t>(seq.size());
    switch (pooling) {
      case PoolingType::kNone:
        std::memcpy(out + row * E, x + t0 * E, static_cast<size_t>(n * E) * sizeof(float));
        row += n;
        break;
      case PoolingType::kCls:
        std::memcpy(out + row * E, x + t0 * E, static_cast<size_t>(E) * sizeof(float));
        ++row;
        break;
      case PoolingType::kLast:
        std::memcpy(out + row * E, x + (t0 + n - 1) * E, static_cast<size_t>(E) * sizeof(float));
        ++row;
        break;
      case PoolingType::kMean:
        for (int64_t e = 0; e < E; ++e) {
          double sum = 0.0;
          for (int64_t i = 0; i < n; ++i) sum += x[(t0 + i) * E + e];
          out[row * E + e] = static_cast<float>(sum / static_cast<double>(n));
        }
        ++row;
        break;
    }
    t0 += n;
  }
  return Status();
}

}  // namespace power
