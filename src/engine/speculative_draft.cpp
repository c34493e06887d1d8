#include "engine/speculative_draft.h"

#include <algorithm>

namespace power::spec {

Status check_same_vocabulary(const text::Tokenizer& target, const text::Tokenizer& draft) {
  if (target.n_tokens() != draft.n_tokens()) {
    return Status(StatusCode::kInvalidArgument,
                  "the draft model's vocabulary differs from the target's (token count)")
        .with("target_tokens", target.n_tokens())
        .with("draft_tokens", draft.n_tokens());
  }
  for (size_t i = 0; i < target.n_tokens(); ++i) {
    const auto id = static_cast<text::TokenId>(i);
    if (target.token_text(id) != draft.token_text(id)) {
      return Status(StatusCode::kInvalidArgument,
                    "the draft model's vocabulary differs from the target's")
          .with("token_id", i)
          .with("target_text", target.token_text(id))
          .with("draft_text", draft.token_text(id));
    }
  }
  return Status();
}

DraftModelDrafter::DraftModelDrafter(const Model& model, Workspace& ws, KvCache* kv,
                                     const SamplerParams& params)
    : model_(model),
      ws_(ws),
      seq_(kv),
      sampler_(params, model.hparams().n_vocab),
      logits_(static_cast<size_t>(model.hparams().n_vocab)) {}

Status DraftModelDrafter::feed(std::span<const int32_t> tokens) {
  while (!tokens.empty()) {
    const size_t n = std::min<size_t>(tokens.size(), static_cast<size_t>(ws_.max_tokens));
    ForwardChunk chunk{&seq_, tokens.first(n), false};
    POWER_RETURN_IF_ERROR(
        model_.forward(ws_, std::span<const ForwardChunk>(&chunk, 1), logits_.data()));
    fed_.insert(fed_.end(), tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n));
    tokens = tokens.subspan(n);
  }
  return Status();
}

Result<int> DraftModelDrafter::draft(std::span<const int32_t> tokens, int max_k,
                                     std::vector<int32_t>& out) {
  q_.clear();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (max_k <= 0 || n == 0) return 0;
  // Room: the committed tokens plus max_k - 1 drafts are fed (the last draft never is).
  const int64_t need = n + max_k - 1;
  if (need > ws_.n_ctx) max_k = static_cast<int>(ws_.n_ctx - n + 1);
  if (max_k <= 0) return 0;
  // Keep the longest common prefix, but feed at least the last committed token.
  size_t common = 0;
  while (common < fed_.size() && common + 1 < tokens.size() && fed_[common] == tokens[common]) {
    ++common;
  }
  if (common < fed_.size()) {
    Status st = seq_.truncate(static_cast<int>(common));
    fed_.resize(common);
    if (!st.ok()) return 0;
  }
  if (!seq_.reserve(static_cast<int>(n + max_k - 1)).ok()) return 0;
  POWER_RETURN_IF_ERROR(feed(tokens.subspan(common)));
  // The penalty history of the committed sequence; the draft sampler's RNG runs on.
  Sampler::State st = sampler_.snapshot();
  st.history.clear();
  const int64_t last_n = sampler_.params().penalty_last_n;
  for (int64_t i = std::max<int64_t>(0, n - last_n); i < n && last_n > 0; ++i) {
    st.history.push_back(tokens[static_cast<size_t>(i)]);
  }
  sampler_.restore(st);
  const bool greedy = sampler_.params().temperature == 0.0f;
  const size_t nv = logits_.size();
  for (int j = 0; j < max_k; ++j) {
    int32_t d;
    if (greedy) {
      d = sampler_.sample(logits_.data());
    } else {
      q_.resize((static_cast<size_t>(j) + 1) * nv);
      float* q = q_.data() + static_cast<size_t>(j) * nv;
      sampler_.distribution(logits_.data(), q);
      d = sampler_.draw(q);
    }
    sampler_.accept(d);
    out.push_back(d);
    if (j + 1 < max_k) POWER_RETURN_IF_ERROR(feed(std::span<const int32_t>(&d, 1)));
  }
  return max_k;
}

}  // namespace power::spec
