// Opening a model file for the runtime: a plain GGUF is mapped and hashed; an encrypted
// container (secure/container.h) is decrypted with the load's model key into locked,
// non-dumpable memory and its identity is the authenticated plaintext SHA-256, so a model and
// its encrypted copy have the same ModelInfo::sha256 and the same receipts.
// Thread-safety: reentrant.
#pragma once

#include <memory>
#include <string>

#include "format/gguf.h"
#include "power/runtime.h"

namespace power::runtime {

struct ModelFile {
  std::shared_ptr<const GgufFile> file;
  std::string sha256;      // lowercase hex of the (plaintext) file
  bool encrypted = false;  // decrypted into locked memory
};

// Errors: the GGUF reader's, the key's (secure/model_key.h), the container's (a wrong key,
// tampering), and kInvalidArgument for a container loaded without any key.
Result<ModelFile> open_model_file(const std::string& path, const LoadOptions& options);

}  // namespace power::runtime
