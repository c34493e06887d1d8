#include "runtime/model_runner.h"

#include "engine/sampler.h"
#include "models/decoder.h"

namespace power::runtime {

ModelRunner::ModelRunner(const Model& model, Workspace& ws, int max_items)
    : model_(model), ws_(ws) {
  chunks_.reserve(static_cast<size_t>(max_items));
  logits_.resize(static_cast<size_t>(max_items) * static_cast<size_t>(model.hparams().n_vocab));
}

Status ModelRunner::run(std::span<const BatchItem> items, std::span<int32_t> next_tokens) {
  const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  POWER_CHECK(items.size() * n_vocab <= logits_.size());
  chunks_.clear();
  for (const BatchItem& it : items) chunks_.push_back(ForwardChunk{it.kv, it.tokens, false});
  POWER_RETURN_IF_ERROR(model_.forward(ws_, chunks_, logits_.data()));
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].wants_token) continue;
    auto* sampler = static_cast<Sampler*>(items[i].runner_state);
    const int32_t t = sampler->sample(logits_.data() + i * n_vocab);
    sampler->accept(t);
    next_tokens[i] = t;
  }
  return Status();
}

}  // namespace power::runtime
