// The tokenizer and chat template of a model file, reached through its architecture's package:
// a package that brings its own vocabulary (sdk::Architecture::tokenizer) or template
// (::chat_template) is asked first; otherwise they come from the file's tokenizer.ggml.* keys
// and tokenizer.chat_template.
// Thread-safety: any thread.
#pragma once

#include <memory>

#include "base/status.h"
#include "chat/chat_template.h"
#include "format/gguf.h"
#include "text/tokenizer.h"

namespace power {

Result<std::unique_ptr<text::Tokenizer>> load_tokenizer(const GgufFile& file);
Result<chat::ChatTemplate> load_chat_template(const GgufFile& file);

}  // namespace power
