// The draft-model drafter of speculative decoding: a second, smaller model with the same
// vocabulary proposes tokens autoregressively with its own KV sequence.
//
// check_same_vocabulary() is the load-time check: equal token counts and, id by id, equal
// token texts; otherwise kInvalidArgument with the first differing id.
// DraftModelDrafter keeps one sequence's draft KV in a KvCache the caller owns (the
// runtime makes one pool per replica). Each draft() brings the draft KV to the sequence's
// committed tokens (truncating what was rolled back: the longest common prefix of what it
// holds and the committed tokens survives), then runs up to max_k single-token passes. The
// draft sampler uses the target request's sampling parameters; its penalty history is reset
// to the committed tokens before each draft (a Sampler::State restore) and its RNG is its
// own. With temperature > 0 the distributions q it drew from are kept for the acceptance
// test (q()).
// Memory: the draft Workspace is the caller's (one per replica, used by one thread); draft
// KV blocks are reserved per draft, and when the pool is short the drafter proposes nothing
// (plain decoding for that step) instead of failing the request.
// Thread-safety: none; used on the replica's worker thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "device/kv_cache.h"
#include "engine/sampler.h"
#include "host/model.h"
#include "text/tokenizer.h"

namespace power::spec {

Status check_same_vocabulary(const text::Tokenizer& target, const text::Tokenizer& draft);

class DraftModelDrafter {
 public:
  DraftModelDrafter(const Model& model, Workspace& ws, KvCache* kv, const SamplerParams& params);
  // Appends up to max_k proposals to `out`; returns how many (0 when the draft KV pool or
  // the context has no room). Errors of the draft model's forward pass are returned.
  Result<int> draft(std::span<const int32_t> tokens, int max_k, std::vector<int32_t>& out);
  // The distributions the last draft's tokens were drawn from (one n_vocab row each);
  // empty with temperature 0 (the verifier needs none).
  std::span<const float> q() const { return q_; }
  // Positions the draft KV holds (tests).
  int kv_tokens() const { return seq_.n_tokens(); }

 private:
  Status feed(std::span<const int32_t> tokens);
  const Model& model_;
  Workspace& ws_;
  KvSequence seq_;
  Sampler sampler_;
  std::vector<int32_t> fed_;  // the tokens whose keys/values seq_ holds
  std::vector<float> logits_, q_;
};

}  // namespace power::spec
