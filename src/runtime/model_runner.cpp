#include "runtime/model_runner.h"

#include "engine/sampler.h"
#include "engine/speculative.h"
#include "host/model.h"

namespace power::runtime {

ModelRunner::ModelRunner(const Model& model, Workspace& ws, int max_items,
                         RecurrentState* recurrent)
    : model_(model), ws_(ws), recurrent_(recurrent) {
  chunks_.reserve(static_cast<size_t>(max_items));
  replay_chunks_.reserve(static_cast<size_t>(max_items));
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
  snapshot_slots_.resize(std::max(snapshot_slots_.size(), items.size()));
  snapshot_count_.assign(items.size(), 0);
  pos0_.assign(items.size(), 0);
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    ForwardChunk c{it.kv, it.tokens, it.n_draft > 0};
    pos0_[i] = it.kv->n_tokens();
    if (recurrent_ != nullptr && it.n_draft > 0) {
      // Snapshots after the chunk's tokens 0 .. S-1 (after token n_draft is the state the pass
      // ends with). A pool short of slots gives fewer (more replays, the same result); the
      // first one is needed: without it this item speculates nothing that could be rolled back.
      std::vector<int32_t>& slots = snapshot_slots_[i];
      slots.assign(it.tokens.size(), -1);
      const int want = std::min(it.snapshots, it.n_draft);
      int got = 0;
      while (got < want) {
        Result<int> slot = recurrent_->allocate();
        if (!slot.ok()) break;
        slots[static_cast<size_t>(got++)] = *slot;
      }
      snapshot_count_[i] = got;
      c.snapshot_slots = slots;
    } else if (recurrent_ != nullptr) {
      c.snapshot_slots = it.checkpoints;  // prefix-cache checkpoints of a prompt chunk
    }
    chunks_.push_back(c);
  }
  const size_t rows = static_cast<size_t>(Model::logit_rows(chunks_));
  if (rows * n_vocab > logits_.size()) logits_.resize(rows * n_vocab);
  Status fst = model_.forward(ws_, chunks_, logits_.data());
  if (!fst.ok()) {
    for (size_t i = 0; i < items.size(); ++i) {
      for (int k = 0; k < snapshot_count_[i]; ++k) recurrent_->release(snapshot_slots_[i][k]);
    }
    return fst;
  }
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
  if (recurrent_ != nullptr) return roll_back_recurrent(items, accepted);
  return Status();
}

Status ModelRunner::roll_back_recurrent(std::span<const BatchItem> items,
                                        std::span<const int32_t> accepted) {
  replay_chunks_.clear();
  Status st;
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    if (it.n_draft == 0) continue;
    const int a = accepted[i], n_snap = snapshot_count_[i];
    const std::vector<int32_t>& slots = snapshot_slots_[i];
    KvSequence& seq = *it.kv;
    if (a < it.n_draft) {
      if (n_snap == 0) {
        // No snapshot: nothing to roll back to. Cannot happen while admission reserves the
        // slots; fail the step rather than continue from a wrong state.
        st = Status(StatusCode::kInternal, "no state snapshot for a rejected draft");
      } else if (a < n_snap) {  // the state after token a of the chunk: saved
        recurrent_->copy(slots[static_cast<size_t>(a)], seq.recurrent_slot());
        if (it.drafter != nullptr) it.drafter->rolled_back(false, 0);
      } else {  // beyond the window: the last snapshot, then the accepted tokens after it
        recurrent_->copy(slots[static_cast<size_t>(n_snap - 1)], seq.recurrent_slot());
        Status t = seq.truncate(static_cast<int>(pos0_[i] + n_snap));
        if (!t.ok() && st.ok()) st = t;
        const auto replay =
            it.tokens.subspan(static_cast<size_t>(n_snap), static_cast<size_t>(a - n_snap + 1));
        replay_chunks_.push_back(ForwardChunk{&seq, replay, false});
        if (it.drafter != nullptr) it.drafter->rolled_back(true, static_cast<int>(replay.size()));
      }
    }
    for (int k = 0; k < n_snap; ++k) recurrent_->release(slots[static_cast<size_t>(k)]);
  }
  if (st.ok() && !replay_chunks_.empty()) {
    const size_t rows = static_cast<size_t>(Model::logit_rows(replay_chunks_));
    const size_t n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
    if (rows * n_vocab > logits_.size()) logits_.resize(rows * n_vocab);
    st = model_.forward(ws_, replay_chunks_, logits_.data());
  }
  return st;
}

}  // namespace power::runtime
