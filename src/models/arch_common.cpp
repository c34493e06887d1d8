#include "models/arch_common.h"

namespace power {

void bind_embeddings(WeightBinder& b, const ModelHparams& hp, TensorView* token_embd,
                     TensorView* output, std::vector<float>* output_norm) {
  namespace tn = tensor_names;
  *token_embd = b.require(tn::kTokenEmbd, {hp.n_embd, hp.n_vocab});
  *output_norm = decoder::to_f32(b.require(tn::kOutputNorm, {hp.n_embd}));
  *output = b.optional(tn::kOutput, {hp.n_embd, hp.n_vocab});
  if (output->data == nullptr) *output = *token_embd;
}

Status check_kernel_limits(const ModelHparams& hp) {
  if (hp.head_dim_k > 1024 || hp.head_dim_v > 1024) {
    return Status(StatusCode::kUnsupported, "head size above 1024 is not supported")
        .with("key_length", hp.head_dim_k)
        .with("value_length", hp.head_dim_v);
  }
  return Status();
}

Result<int64_t> vocab_size(const GgufFile& file) {
  const GgufTensor* t = file.find_tensor(tensor_names::kTokenEmbd);
  if (t == nullptr || t->ne.size() != 2) {
    return Status(StatusCode::kNotFound, "missing 2-D tensor")
        .with("tensor", tensor_names::kTokenEmbd);
  }
  return static_cast<int64_t>(t->ne[1]);
}

RopeParams rope_params(const ModelHparams& hp, const std::vector<float>& freq_factors) {
  RopeParams p;
  p.kind = hp.rope_kind;
  p.n_rot = hp.n_rot;
  p.freq_base = hp.rope_freq_base;
  p.freq_scale = hp.rope_freq_scale;
  p.freq_factors = freq_factors.empty() ? nullptr : freq_factors.data();
  return p;
}

}  // namespace power
