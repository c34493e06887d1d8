// The architectures built into Power, each a package on the public model SDK (power/sdk.h)
// in its own folder. Packages include only the SDK's headers and each other's here (the
// build gives them no other include path; tests/models/package_includes_test.sh checks it).
#pragma once

#include <memory>

#include "power/sdk.h"

namespace power::models {

// Adds every built-in architecture: llama, qwen2, qwen3, phi3 (each with the nextn MTP head
// where the family has one), mamba and bert.
Status register_builtin_architectures(sdk::Registry& registry);

std::unique_ptr<sdk::Model> make_llama();
std::unique_ptr<sdk::Model> make_qwen2();
std::unique_ptr<sdk::Model> make_qwen3();
std::unique_ptr<sdk::Model> make_phi3();
std::unique_ptr<sdk::Model> make_bert();
std::unique_ptr<sdk::Model> make_mamba();
std::unique_ptr<sdk::Model> make_nextn(sdk::RopeMode mode);

}  // namespace power::models
