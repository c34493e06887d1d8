#include "runtime/model_runner.h"

#include "engine/sampler.h"
#include "engine/speculative.h"
#include "host/model.h"

namespace power::runtime {

ModelRunner::ModelRunner(const Model& model, Workspace& ws, int max_items)
    : model_(model), ws_(ws) {
  chunks_.reserve(static_cast<size_t>(max_items));
  logits_.resize(static_cast<size_t>(max_items) * static_cast<size_t>(model.hparams().n_vocab));
}

Status ModelRunner::run(std::span<const BatchItem> items, std::span<int32_t> next_tokens) {
  accepted_scratch_.assign(items.size(), 0);
  return run_speculative(items, next_tokens, accepted_scratch_);
}

Status ModelRunner::run_speculative(std::span<const BatchItem> items,
                                    std::span<int32_t> next_tokens, std::span<int32_t> accepted) {
  const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  chunks_.clear();
  for (const BatchItem& it : items) {
    chunks_.push_back(ForwardChunk{it.kv, it.tokens, it.n_draft > 0});
  }
  const size_t rows = static_cast<size_t>(Model::logit_rows(chunks_));
  if (rows * n_vocab > logits_.size()) logits_.resize(rows * n_vocab);
  POWER_RETURN_IF_ERROR(model_.forward(ws_, chunks_, logits_.data()));
  // MTP drafters read the final hidden states forward() leaves in the workspace (every
  // token's row, n_embd floats apart).
  const int64_t n_embd = model_.hparams().n_embd;
  const bool have_hidden = ws_.hidden_row(0) != nullptr && ws_.hidden.ld == n_embd;
  int64_t token_row = 0;
  for (const BatchItem& it : items) {
    const auto n = static_cast<int64_t>(it.tokens.size());
    if (have_hidden && it.drafter != nullptr && it.drafter->wants_hidden()) {
      it.drafter->observe_hidden(it.kv->n_tokens() - n, ws_.hidden_row(token_row), n);
    }
    token_row += n;
  }
  size_t row = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    const float* first = logits_.data() + row * n_vocab;
    row += it.n_draft > 0 ? it.tokens.size() : 1;
    accepted[i] = 0;
    if (!it.wants_token) continue;
    auto* sampler = static_cast<Sampler*>(it.runner_state);
    if (it.n_draft > 0) {
      const auto drafts = it.tokens.subspan(1);
      const std::span<const float> q =
          it.drafter != nullptr ? it.drafter->draft_probs() : std::span<const float>();
      const spec::VerifyResult v = spec::verify(
          *sampler, first, static_cast<int64_t>(n_vocab), drafts,
          q.size() >= drafts.size() * n_vocab ? q : std::span<const float>(), verify_scratch_);
      accepted[i] = v.accepted;
      next_tokens[i] = v.next;
      continue;
    }
    const int32_t t = sampler->sample(first);
    sampler->accept(t);
    next_tokens[i] = t;
  }
  return Status();
}

}  // namespace power::runtime
