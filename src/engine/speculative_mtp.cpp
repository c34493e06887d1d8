#include "engine/speculative_mtp.h"

#include <algorithm>

#include "engine/speculative.h"

namespace power::spec {

MtpDrafter::MtpDrafter(const Model& head, Workspace& ws, KvCache* kv, const SamplerParams& params)
    : head_(head),
      ws_(ws),
      seq_(kv),
      sampler_(params, head.hparams().n_vocab),
      d_(head.hparams().n_embd),
      out_hidden_(static_cast<size_t>(head.hparams().n_embd)),
      logits_(static_cast<size_t>(head.hparams().n_vocab)) {}

void MtpDrafter::observe(int64_t pos0, const float* rows, int64_t n) {
  if (pos0 < fed_) {  // positions the MTP KV already holds (a recompute gives the same rows)
    const int64_t skip = std::min(n, fed_ - pos0);
    rows += skip * d_;
    n -= skip;
    pos0 += skip;
  }
  if (n <= 0) return;
  const size_t at = static_cast<size_t>(pos0 - fed_);
  // Rows past this pass are stale (rejected positions); gaps stay zero.
  hidden_.resize((at + static_cast<size_t>(n)) * static_cast<size_t>(d_), 0.0f);
  std::copy(rows, rows + n * d_, hidden_.begin() + static_cast<std::ptrdiff_t>(at * d_));
}

Status MtpDrafter::run(const float* hidden, std::span<const int32_t> tokens) {
  return head_.forward_head(ws_, seq_, hidden, tokens, out_hidden_.data(), logits_.data());
}

Result<int> MtpDrafter::draft(std::span<const int32_t> tokens, int max_k,
                              std::vector<int32_t>& out) {
  q_.clear();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (max_k <= 0 || n < 2) return 0;
  const int64_t target = n - 1;  // committed pairs: (h_i, t[i+1]) for i < n - 1
  if (fed_ > target) {           // cannot happen while committed tokens only grow
    fed_ = target;
    hidden_.clear();
  }
  // Rollback: drop the previous round's chain (positions >= fed_).
  if (seq_.n_tokens() > fed_) (void)seq_.truncate(static_cast<int>(fed_));
  const int64_t fresh = target - fed_;
  if (fresh <= 0) return 0;  // nothing new since the last draft: decode plainly
  if (target + max_k - 1 > ws_.n_ctx) max_k = static_cast<int>(ws_.n_ctx - target + 1);
  if (max_k <= 0) return 0;
  if (!seq_.reserve(static_cast<int>(target + max_k - 1)).ok()) return 0;
  hidden_.resize(static_cast<size_t>(fresh * d_), 0.0f);  // unseen rows: zeros
  for (int64_t off = 0; off < fresh; off += ws_.max_tokens) {
    const int64_t m = std::min<int64_t>(ws_.max_tokens, fresh - off);
    POWER_RETURN_IF_ERROR(
        run(hidden_.data() + off * d_,
            tokens.subspan(static_cast<size_t>(fed_ + off + 1), static_cast<size_t>(m))));
  }
  fed_ = target;
  hidden_.clear();  // what remains is at positions >= n - 1: not committed pairs
  // The draft sampler sees the committed sequence's penalty history; its RNG runs on.
  reset_penalty_history(sampler_, tokens);
  std::vector<float> h(static_cast<size_t>(d_));
  POWER_RETURN_IF_ERROR(draw_drafts(sampler_, logits_, q_, max_k, out, [&](const int32_t& d) {
    // The MTP output stands in for the main hidden state at the drafted position.
    std::copy(out_hidden_.begin(), out_hidden_.end(), h.begin());
    return run(h.data(), std::span<const int32_t>(&d, 1));
  }));
  return max_k;
}

}  // namespace power::spec
