// The runtime side of speculative decoding: choosing a request's drafter and its per-sequence
// state (a runtime::DraftSource the scheduler asks for drafts).
//
// resolve_mode() applies the rules: `off` speculates not at all; `ngram` always works (prompt
// lookup needs no weights); `draft` needs a draft model loaded with the target
// (LoadOptions::draft_model); `mtp` needs MTP layers (`<arch>.nextn_predict_layers` in the
// GGUF, the draft-head package of the architecture; kInvalidArgument naming the key otherwise);
// `auto` picks the draft model when one was loaded (the caller asked for it), else the MTP head
// when the file has one, else n-gram. A mode that was asked for by name and is unavailable is an
// error, never a silent downgrade. SpecSequence drafts with its drafter for at most the adaptive k
// (AdaptiveK) tokens and counts drafted / accepted / verify passes for the request and the replica.
// Thread-safety: used on the replica's worker thread (scheduler plan/commit and the runner);
// the replica counters are updated under the replica's mutex (commit runs under it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/speculative.h"
#include "engine/speculative_draft.h"
#include "engine/speculative_mtp.h"
#include "format/gguf.h"
#include "power/request.h"
#include "runtime/scheduler.h"

namespace power::runtime {

// Totals of a replica (RuntimeStats).
struct SpecCounters {
  uint64_t drafted = 0;
  uint64_t accepted = 0;
  uint64_t verify_passes = 0;  // target passes that verified drafts
  uint64_t verify_tokens = 0;  // tokens those passes committed (accepted + 1 each)
  uint64_t restores = 0, replays = 0, replayed_tokens = 0;  // recurrent-state rollbacks
};

// spec::Config from the public options (validated).
Result<spec::Config> to_spec_config(const SpeculativeOptions& options);
// Fills the ratios of a finished request's usage.
void finish_usage(SpeculativeUsage& usage, int64_t completion_tokens);
// The mode a request runs with (kOff, kNgram, kDraft or kMtp), or why the asked mode cannot
// run. `have_mtp`: the target's MTP head loaded.
Result<spec::Mode> resolve_mode(spec::Mode asked, bool have_draft_model, bool have_mtp,
                                const GgufFile& target);

class SpecSequence : public DraftSource {
 public:
  // `draft` and `mtp` are null for the n-gram drafter (at most one is set). `usage` (the
  // request's) and `totals` (the replica's) are updated on every verified pass.
  SpecSequence(const spec::Config& config, std::unique_ptr<spec::DraftModelDrafter> draft,
               SpeculativeUsage* usage, SpecCounters* totals,
               std::unique_ptr<spec::MtpDrafter> mtp = nullptr);
  int draft(std::span<const int32_t> tokens, int max_k, std::vector<int32_t>& out) override;
  void verified(int drafted, int accepted) override;
  void rolled_back(bool replayed, int replayed_tokens) override;
  std::span<const float> draft_probs() const override;
  bool wants_hidden() const override { return mtp_ != nullptr; }
  void observe_hidden(int64_t pos0, const float* rows, int64_t n_rows) override;
  int current_k() const { return k_.next(); }
  // Predicted output (GenerateRequest::prediction, tokenized): drafts come from it first,
  // aligned with what has been generated after the prompt's n_prompt tokens (or, once the
  // output departs from it, from where the output's last tokens occur in it); the n-gram
  // lookup over the sequence fills in when it has nothing. N-gram mode only.
  void set_prediction(std::vector<int32_t> prediction, size_t n_prompt);
  // The draft model's error, if one happened (drafting then stops for this sequence).
  const Status& error() const { return error_; }

 private:
  spec::Config cfg_;
  spec::NgramDrafter ngram_;
  std::unique_ptr<spec::DraftModelDrafter> model_;
  std::unique_ptr<spec::MtpDrafter> mtp_;
  int draft_from_prediction(std::span<const int32_t> tokens, int k, std::vector<int32_t>& out);
  std::vector<int32_t> prediction_;
  size_t n_prompt_ = 0;
  size_t prediction_cursor_ = 0;  // where the last match in the prediction ended
  spec::AdaptiveK k_;
  SpeculativeUsage* usage_;
  SpecCounters* totals_;
  Status error_;
};

}  // namespace power::runtime
