// The built-in architectures, in one visible table.
#include "builtin.h"

namespace power::models {

Status register_builtin_architectures(sdk::Registry& r) {
  sdk::Architecture a;
  a = {};
  a.name = "llama";
  a.description = "Llama 1/2/3, Mistral-style dense decoders";
  a.create = make_llama;
  a.create_draft_head = [] { return make_nextn(sdk::RopeMode::kNorm); };
  POWER_RETURN_IF_ERROR(r.add(a));
  a = {};
  a.name = "qwen2";
  a.description = "Qwen2 / Qwen2.5 dense decoders";
  a.create = make_qwen2;
  a.create_draft_head = [] { return make_nextn(sdk::RopeMode::kNeox); };
  POWER_RETURN_IF_ERROR(r.add(a));
  a = {};
  a.name = "qwen3";
  a.description = "Qwen3 dense decoders";
  a.create = make_qwen3;
  a.create_draft_head = [] { return make_nextn(sdk::RopeMode::kNeox); };
  POWER_RETURN_IF_ERROR(r.add(a));
  a = {};
  a.name = "phi3";
  a.description = "Phi-3 / Phi-3.5 dense decoders";
  a.create = make_phi3;
  POWER_RETURN_IF_ERROR(r.add(a));
  a = {};
  a.name = "mamba";
  a.description = "Mamba (v1) state-space decoders (recurrent state per sequence)";
  a.create = make_mamba;
  POWER_RETURN_IF_ERROR(r.add(a));
  a = {};
  a.name = "bert";
  a.description = "BERT-family text-embedding encoders";
  a.kind = sdk::ModelKind::kEncoder;
  a.create = make_bert;
  return r.add(a);
}

}  // namespace power::models
