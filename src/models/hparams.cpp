#include "models/hparams.h"

namespace power {
namespace {

Result<int64_t> required_int(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return Status(StatusCode::kNotFound, "missing metadata key").with("key", key);
  if (v->as_array() != nullptr) {
    return Status(StatusCode::kUnsupported, "per-layer arrays are not supported for this key")
        .with("key", key);
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

Result<int64_t> optional_int(const GgufFile& f, const std::string& key, int64_t def, int64_t lo,
                             int64_t hi) {
  if (f.find(key) == nullptr) return def;
  return required_int(f, key, lo, hi);
}

Result<double> optional_float(const GgufFile& f, const std::string& key, double def, double lo,
                              double hi) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return def;
  auto x = v->as_f64();
  if (!x || !(*x >= lo && *x <= hi)) {
    return Status(StatusCode::kInvalidArgument, "metadata value out of range").with("key", key);
  }
  return *x;
}

}  // namespace

Result<ModelHparams> read_decoder_hparams(const GgufFile& f, const std::string& arch) {
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  ModelHparams hp;
  hp.arch = arch;
  const std::string p = arch + ".";
  POWER_ASSIGN_OR_RETURN(hp.n_embd, required_int(f, p + "embedding_length", 1, kMaxDim));
  POWER_ASSIGN_OR_RETURN(hp.n_layer, required_int(f, p + "block_count", 1, 4096));
  // MTP (NextN) layers are counted in block_count and sit after the main layers; the main
  // model runs only those before them (models/mtp.h binds the rest).
  POWER_ASSIGN_OR_RETURN(int64_t n_nextn,
                         optional_int(f, p + "nextn_predict_layers", 0, 0, hp.n_layer - 1));
  hp.n_layer -= n_nextn;
  POWER_ASSIGN_OR_RETURN(hp.n_ff, required_int(f, p + "feed_forward_length", 1, kMaxDim));
  POWER_ASSIGN_OR_RETURN(hp.n_head, required_int(f, p + "attention.head_count", 1, 65536));
  POWER_ASSIGN_OR_RETURN(hp.n_head_kv,
                         optional_int(f, p + "attention.head_count_kv", hp.n_head, 1, hp.n_head));
  if (hp.n_head % hp.n_head_kv != 0) {
    return Status(StatusCode::kInvalidArgument, "head_count is not a multiple of head_count_kv")
        .with("head_count", hp.n_head)
        .with("head_count_kv", hp.n_head_kv);
  }
  POWER_ASSIGN_OR_RETURN(hp.n_ctx_train,
                         optional_int(f, p + "context_length", 2048, 1, int64_t{1} << 30));
  const int64_t default_head = hp.n_embd / hp.n_head;
  POWER_ASSIGN_OR_RETURN(hp.head_dim_k,
                         optional_int(f, p + "attention.key_length", default_head, 1, 65536));
  POWER_ASSIGN_OR_RETURN(hp.head_dim_v,
                         optional_int(f, p + "attention.value_length", default_head, 1, 65536));
  POWER_ASSIGN_OR_RETURN(
      int64_t n_rot, optional_int(f, p + "rope.dimension_count", hp.head_dim_k, 0, hp.head_dim_k));
  if (n_rot % 2 != 0) {
    return Status(StatusCode::kInvalidArgument, "rope.dimension_count must be even")
        .with("key", p + "rope.dimension_count");
  }
  hp.n_rot = static_cast<int>(n_rot);
  POWER_ASSIGN_OR_RETURN(double base, optional_float(f, p + "rope.freq_base", 10000.0, 1e-3, 1e12));
  hp.rope_freq_base = static_cast<float>(base);
  POWER_ASSIGN_OR_RETURN(double eps,
                         optional_float(f, p + "attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0));
  hp.rms_eps = static_cast<float>(eps);

  std::string scaling = "none";
  if (f.find(p + "rope.scaling.type") != nullptr) {
    POWER_ASSIGN_OR_RETURN(scaling, f.get_string(p + "rope.scaling.type"));
  }
  POWER_ASSIGN_OR_RETURN(double factor,
                         optional_float(f, p + "rope.scaling.factor", 0.0, 0.0, 1e6));
  if (factor == 0.0) {
    // Older files carry the linear scale directly.
    POWER_ASSIGN_OR_RETURN(double linear,
                           optional_float(f, p + "rope.scale_linear", 0.0, 0.0, 1e6));
    factor = linear;
  }
  if (scaling == "linear") {
    if (factor > 0.0) hp.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && scaling != "llama3") {
    // llama3 scaling arrives as the rope_freqs tensor, handled by the architecture.
    return Status(StatusCode::kUnsupported, "rope scaling type is not supported")
        .with("key", p + "rope.scaling.type")
        .with("value", scaling);
  } else if (scaling == "none" && factor > 0.0 && factor != 1.0) {
    hp.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  POWER_ASSIGN_OR_RETURN(hp.sliding_window,
                         optional_int(f, p + "attention.sliding_window", 0, 0, int64_t{1} << 30));
  return hp;
}

}  // namespace power
