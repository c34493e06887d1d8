// gpt2: a GPT-2 model package written on Power's public model SDK only (power/sdk.h), built
// against the installed SDK as an example of a package that lives outside Power's tree.
//
// Contract: architecture() describes the package for general.architecture = "gpt2" files
// laid out as llama.cpp's convert_hf_to_gguf.py writes them (gpt2.* keys; token_embd,
// position_embd, blk.N.{attn_norm,attn_qkv,attn_output,ffn_norm,ffn_up,ffn_down}.{weight,bias},
// output_norm.{weight,bias}, output.weight optional: the token embedding is the output head
// when it is absent). Register it in process with power::sdk::register_architecture() or hand
// it to the Registry of a plugin (plugin.cpp). Every model it creates is a ModelKind::kDecoder
// with one attention KV state per layer and a context bounded by its learned positions.
// Thread-safety: architecture() and the Architecture's callbacks may be called from any
// thread; a created model follows the sdk::Model contract (forward() is const).
#pragma once

#include "power/sdk.h"

namespace gpt2 {

// How the forward pass computes; the defaults are the measured choice (gpt2.cpp's header).
struct Numerics {
  // kGeluTanhF16 (llama.cpp's f16-table GELU) or kGeluTanh (exact tanh form).
  power::sdk::Activation gelu = power::sdk::Activation::kGeluTanhF16;
  // kDefault lets the device quantize activations for quantized weights as llama.cpp does;
  // kExact keeps every product in f32.
  power::sdk::Precision precision = power::sdk::Precision::kDefault;
};

// The "gpt2" architecture: a decoder package using `numerics`, with the file's own tokenizer
// (tokenizer.ggml.*) and chat template.
power::sdk::Architecture architecture(const Numerics& numerics = {});

}  // namespace gpt2
