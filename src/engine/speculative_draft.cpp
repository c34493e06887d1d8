#include "engine/speculative_draft.h"

#include <algorithm>

#include "engine/speculative.h"

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
  reset_penalty_history(sampler_, tokens);
  POWER_RETURN_IF_ERROR(draw_drafts(sampler_, logits_, q_, max_k, out, [&](const int32_t& d) {
    return feed(std::span<const int32_t>(&d, 1));
  }));
  return max_k;
}

}  // namespace power::spec
