// The MTP drafter of speculative decoding: the model's own multi-token-prediction head
// (a ModelKind::kDraftHead package, src/models/nextn) proposes tokens from the main model's final
// hidden states.
//
// The MTP KV holds one position per committed pair (h_i, t[i+1]): the main model's hidden
// state at position i and the token after it. The runner hands over the hidden states of
// every target pass of the sequence (observe(): prefill chunks, plain decode steps and verify
// chunks, rows at the positions the pass wrote); draft() then
//  1. truncates the MTP KV to the committed pairs it holds (drafts of the previous round and
//     rows of rejected positions go: the rollback),
//  2. feeds the new committed pairs i in [fed, n - 1) in batches (one pass for a verify's
//     accepted run), whose last output gives the first draft, and
//  3. chains: draft j + 1 comes from the MTP run on (its own output for draft j, draft j).
// Hidden states never observed (a prompt prefix served from the prefix cache) are fed as zeros:
// drafts get worse there, the committed output never changes (the target verifies).
// With temperature > 0 the distributions the drafts were drawn from are kept (q()).
// Memory: the MTP Workspace is the caller's (one per replica); MTP KV blocks are reserved per
// draft; when the pool is short the drafter proposes nothing for that step.
// Thread-safety: none; used on the replica's worker thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "device/kv_cache.h"
#include "engine/sampler.h"
#include "host/model.h"

namespace power::spec {

class MtpDrafter {
 public:
  MtpDrafter(const Model& head, Workspace& ws, KvCache* kv, const SamplerParams& params);
  // Hidden states (n_embd floats per row) of the main model at positions [pos0, pos0 + n).
  void observe(int64_t pos0, const float* rows, int64_t n);
  // Appends up to max_k proposals for the committed `tokens` to `out`; returns how many.
  Result<int> draft(std::span<const int32_t> tokens, int max_k, std::vector<int32_t>& out);
  std::span<const float> q() const { return q_; }
  // Committed pairs the MTP KV holds (tests).
  int64_t fed() const { return fed_; }

 private:
  Status run(const float* hidden, std::span<const int32_t> tokens);
  const Model& head_;
  Workspace& ws_;
  KvSequence seq_;
  Sampler sampler_;
  int64_t d_;
  int64_t fed_ = 0;            // committed pairs in seq_ (positions [0, fed_))
  std::vector<float> hidden_;  // observed rows for positions [fed_, fed_ + rows)
  std::vector<float> out_hidden_, logits_, q_;
};

}  // namespace power::spec
