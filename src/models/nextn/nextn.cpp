// nextn: the MTP (multi-token prediction, "NextN") head of a llama / qwen2 / qwen3 file, as
// DeepSeek-V3, GLM-4.5 and Qwen3-Next style files carry them: a ModelKind::kDraftHead.
//
// File layout (llama.cpp's convention): `<arch>.nextn_predict_layers` = N, and
// `<arch>.block_count` counts the main layers plus the N MTP layers, which sit at block indices
// [n_main, n_main + N). Each MTP block holds an ordinary decoder block (attn_norm, attn_q/k/v,
// attn_output, ffn_norm, ffn_gate/up/down, optional biases and q/k norms) and:
//   blk.B.nextn.eh_proj.weight          [2 * n_embd, n_embd]  concat(enorm(e), hnorm(h)) -> x
//   blk.B.nextn.enorm.weight            [n_embd]              RMSNorm of the token embedding
//   blk.B.nextn.hnorm.weight            [n_embd]              RMSNorm of the main hidden state
//   blk.B.nextn.shared_head_norm.weight [n_embd]   optional: output_norm when absent
//   blk.B.nextn.shared_head_head.weight [n_embd, n_vocab] optional: the main output head
//   blk.B.nextn.embed_tokens.weight     [n_embd, n_vocab] optional: token_embd
//
// The MTP step at position i combines the main model's final hidden state h_i (before the
// output norm) with the embedding of the token at i + 1 and predicts the token at i + 2:
//   x = eh_proj([enorm(embed(t[i+1])); hnorm(h_i)]); x = block(x) (attention over the head's
//   own KV state, one layer); logits = head(shared_head_norm(x)).
// Deeper drafts reuse the first MTP layer on its own output (x stands in for h_{i+1}), as
// DeepSeek-V3 style runtimes do; only layer 0 is run (further layers are validated, unused).
#include <memory>
#include <string>
#include <vector>

#include "builtin.h"
#include "decoder/decoder.h"
#include "decoder/tensor_names.h"

namespace power::models {
namespace {

namespace tn = tensor_names;

class NextN final : public sdk::Model {
 public:
  explicit NextN(sdk::RopeMode mode) : mode_(mode) {}

  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override {
    const std::string arch = f.architecture();
    POWER_ASSIGN_OR_RETURN(hp_, read_decoder_hparams(f, arch));
    hp_.rope_mode = mode_;
    if (hp_.n_nextn == 0) {
      return Status(StatusCode::kInvalidArgument, "the model has no MTP layers")
          .with("missing_key", arch + ".nextn_predict_layers");
    }
    const int64_t first_block = hp_.n_layer;  // the main layers come first
    const int64_t d = hp_.n_embd;
    // Shared with the main model when the MTP block has none of its own.
    const sdk::Weight main_embd = w.require(tn::kTokenEmbd, {d, sdk::kAnyDim}, sdk::kUseRows);
    hp_.n_vocab = main_embd ? main_embd.ne[1] : 0;
    auto nextn = [](int64_t blk, const char* what) {
      return "blk." + std::to_string(blk) + ".nextn." + what + ".weight";
    };
    LayerTensors what;
    what.qk_norm = Need::kOptional;
    for (int64_t l = 0; l < hp_.n_nextn; ++l) {
      const int64_t i = first_block + l;
      DecoderLayer L = bind_layer(w, hp_, i, what);
      const sdk::Weight eh = w.require(nextn(i, "eh_proj"), {2 * d, d}, sdk::kUseMatmul);
      const sdk::Weight en = w.require(nextn(i, "enorm"), {d}, sdk::kUseVector);
      const sdk::Weight hn = w.require(nextn(i, "hnorm"), {d}, sdk::kUseVector);
      const sdk::Weight sn = w.optional(nextn(i, "shared_head_norm"), {d}, sdk::kUseVector);
      const sdk::Weight head =
          w.optional(nextn(i, "shared_head_head"), {d, hp_.n_vocab}, sdk::kUseMatmul);
      const sdk::Weight emb = w.optional(nextn(i, "embed_tokens"), {d, hp_.n_vocab}, sdk::kUseRows);
      if (static_cast<bool>(L.q_norm) != static_cast<bool>(L.k_norm)) {
        w.fail(Status(StatusCode::kInvalidArgument, "MTP block has only one of the q/k norms")
                   .with("block", i));
      }
      if (l == 0) {  // the layer drafts run on
        layer_ = L;
        eh_proj_ = eh;
        enorm_ = en;
        hnorm_ = hn;
        head_norm_ = sn;
        head_ = head;
        embed_ = emb;
      }
    }
    const sdk::Weight main_out = w.optional(tn::kOutput, {d, hp_.n_vocab}, sdk::kUseMatmul);
    const sdk::Weight main_norm = w.require(tn::kOutputNorm, {d}, sdk::kUseVector);
    rope_freqs_ = w.optional(tn::kRopeFreqs, {hp_.n_rot / 2}, sdk::kUseVector);
    if (!embed_) embed_ = main_embd;
    if (!head_) {
      head_ = main_out ? main_out : w.require(tn::kTokenEmbd, {d, hp_.n_vocab}, sdk::kUseMatmul);
    }
    if (!head_norm_) head_norm_ = main_norm;
    spec.kind = sdk::ModelKind::kDraftHead;
    spec.n_vocab = hp_.n_vocab;
    spec.n_embd = d;
    spec.n_layer = hp_.n_nextn;
    spec.n_ctx_train = hp_.n_ctx_train;
    // One layer of KV state: the MTP layer's own.
    spec.state.assign(1, sdk::LayerState::attention(hp_.n_head_kv, hp_.head_dim_k, hp_.head_dim_v));
    declare_decoder_ops(spec);
    spec.exports_hidden = true;
    return Status();
  }

  void plan(sdk::Planner& p) override {
    buffers_ = plan_decoder(p, hp_);
    concat_ = p.rows(2 * hp_.n_embd, "concat");
  }

  Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const DecoderActs a = decoder_acts(f, buffers_);
    const int64_t d = hp_.n_embd;
    const sdk::Act concat = f.act(concat_);
    op.embed(embed_, sdk::Index::kTokens, a.xn);
    op.rms_norm(a.xn, &enorm_, concat.slice(0, d), hp_.rms_eps);
    op.rms_norm(f.hidden_in(), &hnorm_, concat.slice(d, d), hp_.rms_eps);
    op.linear(eh_proj_, nullptr, concat, a.x);
    run_decoder_layer(op, hp_, 0, layer_, rope_of(hp_, rope_freqs_), a);
    DecoderHead head;
    head.output_norm = head_norm_;
    head.output = head_;
    run_output_head(f, hp_, head, buffers_, a.x);
    return Status();
  }

 private:
  sdk::RopeMode mode_;
  DecoderHparams hp_;
  DecoderLayer layer_;
  sdk::Weight eh_proj_, enorm_, hnorm_, head_norm_, head_, embed_, rope_freqs_;
  DecoderBuffers buffers_;
  sdk::Buffer concat_;
};

}  // namespace

std::unique_ptr<sdk::Model> make_nextn(sdk::RopeMode mode) {
  return std::make_unique<NextN>(mode);
}

}  // namespace power::models
