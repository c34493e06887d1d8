// Registering architectures: which package runs a file whose general.architecture is NAME.
//
// In process: power::sdk::register_architecture() before loading (the built-in packages are
// registered the same way, in one visible function). As a plugin: a shared library exports
// power_model_plugin() (plugin.h), and `power run|serve --model-lib libfoo.so` hands its
// register function a Registry. A name that is already registered is refused.
// A package may also bring its own tokenizer vocabulary and chat template; without them
// Power reads the file's tokenizer.ggml.* keys and tokenizer.chat_template.
// Thread-safety: register_architecture() may be called from any thread; an Architecture's
// callbacks must be callable concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "power/sdk/file.h"
#include "power/sdk/model.h"
#include "power/status.h"

namespace power::sdk {

// A vocabulary Power's tokenizers can run: SentencePiece BPE ("llama"), byte-level BPE
// ("gpt2", with the pre-tokenizer named by `pre`) or WordPiece ("bert"); the fields mean what
// the GGUF tokenizer.ggml.* keys of the same names mean. Unset optionals take llama.cpp's
// defaults for the tokenizer model.
struct TokenizerSpec {
  std::string model;
  std::string pre;
  std::string model_name;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;
  std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad, cls, mask;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

struct Architecture {
  std::string name;  // general.architecture
  std::string description;
  ModelKind kind = ModelKind::kDecoder;  // what create() makes (routing: chat vs. embeddings)
  std::function<std::unique_ptr<Model>()> create;
  // Optional: the package of the MTP (NextN) layers such files carry
  // (<arch>.nextn_predict_layers), a ModelKind::kDraftHead.
  std::function<std::unique_ptr<Model>()> create_draft_head;
  // Optional: the model's own vocabulary, instead of the file's tokenizer.ggml.* keys.
  std::function<Result<TokenizerSpec>(const ModelFile&)> tokenizer;
  // Optional: the model's own chat template (Jinja), instead of tokenizer.chat_template.
  std::function<Result<std::string>(const ModelFile&)> chat_template;
};

class Registry {
 public:
  virtual ~Registry() = default;
  virtual Status add(Architecture arch) = 0;
};

// Registers an architecture in this process (defined in Power's runtime library; a plugin
// uses the Registry it is handed instead).
Status register_architecture(Architecture arch);
// Loads a model plugin (plugin.h) into this process, as `--model-lib` does: kUnsupported
// naming both versions when it was built against another SDK version. Loading the same
// library twice is a no-op.
Status load_model_library(const std::string& path);

}  // namespace power::sdk
