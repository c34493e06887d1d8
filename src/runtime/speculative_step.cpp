#include "runtime/speculative_step.h"

#include <algorithm>
#include <string>

namespace power::runtime {

Result<spec::Config> to_spec_config(const SpeculativeOptions& o) {
  spec::Config c;
  POWER_ASSIGN_OR_RETURN(c.mode, spec::parse_mode(o.mode));
  c.k = o.k;
  c.s = o.s;
  c.adaptive = o.adaptive;
  POWER_RETURN_IF_ERROR(c.validate());
  return c;
}

void finish_usage(SpeculativeUsage& u, int64_t completion_tokens) {
  u.acceptance_rate = u.drafted > 0 ? static_cast<double>(u.accepted) / u.drafted : 0.0;
  u.tokens_per_pass =
      u.target_passes > 0 ? static_cast<double>(completion_tokens) / u.target_passes : 0.0;
}

Result<spec::Mode> resolve_mode(spec::Mode asked, bool have_draft_model, bool have_mtp,
                                const GgufFile& target) {
  switch (asked) {
    case spec::Mode::kOff:
    case spec::Mode::kNgram:
      return asked;
    case spec::Mode::kAuto:
      if (have_draft_model) return spec::Mode::kDraft;
      return have_mtp ? spec::Mode::kMtp : spec::Mode::kNgram;
    case spec::Mode::kDraft:
      if (!have_draft_model) {
        return Status(StatusCode::kInvalidArgument,
                      "speculative mode 'draft' needs a draft model loaded with the target "
                      "model");
      }
      return asked;
    case spec::Mode::kMtp: {
      auto arch_r = target.get_string("general.architecture");
      const std::string arch = arch_r.ok() ? *arch_r : std::string();
      const std::string key = arch + ".nextn_predict_layers";
      if (have_mtp) return asked;
      auto layers = target.get_u64(key);
      if (!layers.ok() || *layers == 0) {
        return Status(StatusCode::kInvalidArgument,
                      "speculative mode 'mtp' needs a model with MTP heads")
            .with("missing_key", key);
      }
      // The loader validates MTP layers whenever a file declares them, so this is a caller
      // that did not load them.
      return Status(StatusCode::kInternal, "the model's MTP layers were not loaded")
          .with(key, *layers);
    }
  }
  return Status(StatusCode::kInvalidArgument, "unknown speculative mode");
}

SpecSequence::SpecSequence(const spec::Config& config,
                           std::unique_ptr<spec::DraftModelDrafter> draft, SpeculativeUsage* usage,
                           SpecCounters* totals, std::unique_ptr<spec::MtpDrafter> mtp)
    : cfg_(config),
      ngram_(config.ngram_min, config.ngram_max),
      model_(std::move(draft)),
      mtp_(std::move(mtp)),
      k_(config.k, config.adaptive),
      usage_(usage),
      totals_(totals) {}

int SpecSequence::draft(std::span<const int32_t> tokens, int max_k, std::vector<int32_t>& out) {
  const int k = std::min(max_k, k_.take());
  if (k <= 0) return 0;
  if (!model_ && !mtp_) {
    if (!prediction_.empty()) {
      if (int n = draft_from_prediction(tokens, k, out); n > 0) return n;
    }
    return ngram_.draft(tokens, k, out);
  }
  if (!error_.ok()) return 0;
  Result<int> n = model_ ? model_->draft(tokens, k, out) : mtp_->draft(tokens, k, out);
  if (!n.ok()) {
    error_ = n.status();  // plain decoding from here on; the target's output is unaffected
    return 0;
  }
  return *n;
}

void SpecSequence::set_prediction(std::vector<int32_t> prediction, size_t n_prompt) {
  prediction_ = std::move(prediction);
  n_prompt_ = n_prompt;
  prediction_cursor_ = 0;
}

int SpecSequence::draft_from_prediction(std::span<const int32_t> tokens, int k,
                                        std::vector<int32_t>& out) {
  const size_t np = prediction_.size();
  if (tokens.size() < n_prompt_) return 0;
  const auto generated = tokens.subspan(n_prompt_);
  // Still on the prediction: its next tokens.
  if (generated.size() < np &&
      std::equal(generated.begin(), generated.end(), prediction_.begin())) {
    const size_t take = std::min<size_t>(static_cast<size_t>(k), np - generated.size());
    out.insert(out.end(), prediction_.begin() + static_cast<std::ptrdiff_t>(generated.size()),
               prediction_.begin() + static_cast<std::ptrdiff_t>(generated.size() + take));
    prediction_cursor_ = generated.size() + take;
    return static_cast<int>(take);
  }
  // Departed from it (an edit): find the output's last tokens in the prediction, longest
  // match first, preferring a place at or after the previous match, and go on from there.
  if (generated.empty()) return 0;
  const size_t max_len = std::min<size_t>(static_cast<size_t>(cfg_.ngram_max), generated.size());
  const size_t min_len = std::max<size_t>(1, static_cast<size_t>(cfg_.ngram_min));
  for (size_t len = max_len; len >= min_len && len > 0; --len) {
    const auto suffix = generated.subspan(generated.size() - len);
    size_t found = np;
    for (size_t pass = 0; pass < 2 && found == np; ++pass) {
      const size_t from = pass == 0 ? prediction_cursor_ : 0;
      for (size_t i = from; i + len < np; ++i) {  // something must follow the match
        if (std::equal(suffix.begin(), suffix.end(),
                       prediction_.begin() + static_cast<std::ptrdiff_t>(i))) {
          found = i;
          break;
        }
      }
    }
    if (found == np) continue;
    const size_t start = found + len;
    const size_t take = std::min<size_t>(static_cast<size_t>(k), np - start);
    out.insert(out.end(), prediction_.begin() + static_cast<std::ptrdiff_t>(start),
               prediction_.begin() + static_cast<std::ptrdiff_t>(start + take));
    prediction_cursor_ = start + take;
    return static_cast<int>(take);
  }
  return 0;
}

void SpecSequence::verified(int drafted, int accepted) {
  k_.update(drafted, accepted);
  usage_->drafted += drafted;
  usage_->accepted += accepted;
  ++usage_->verify_passes;
  totals_->drafted += static_cast<uint64_t>(drafted);
  totals_->accepted += static_cast<uint64_t>(accepted);
  ++totals_->verify_passes;
  totals_->verify_tokens += static_cast<uint64_t>(accepted) + 1;
}

void SpecSequence::rolled_back(bool replayed, int replayed_tokens) {
  if (replayed) {
    ++usage_->replays;
    usage_->replayed_tokens += replayed_tokens;
    ++totals_->replays;
    totals_->replayed_tokens += static_cast<uint64_t>(replayed_tokens);
  } else {
    ++usage_->restores;
    ++totals_->restores;
  }
}

std::span<const float> SpecSequence::draft_probs() const {
  if (model_) return model_->q();
  return mtp_ ? mtp_->q() : std::span<const float>();
}

void SpecSequence::observe_hidden(int64_t pos0, const float* rows, int64_t n_rows) {
  if (mtp_) mtp_->observe(pos0, rows, n_rows);
}

}  // namespace power::runtime
