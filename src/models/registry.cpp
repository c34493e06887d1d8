// The model registry: every architecture Power runs, in one visible table.
#include <string>
#include <vector>

#include "models/model.h"

namespace power {

Result<std::unique_ptr<Model>> load_llama(std::shared_ptr<const GgufFile> file);
Result<std::unique_ptr<Model>> load_qwen2(std::shared_ptr<const GgufFile> file);
Result<std::unique_ptr<Model>> load_qwen3(std::shared_ptr<const GgufFile> file);
Result<std::unique_ptr<Model>> load_phi3(std::shared_ptr<const GgufFile> file);

namespace {

struct ArchEntry {
  const char* name;
  Result<std::unique_ptr<Model>> (*load)(std::shared_ptr<const GgufFile>);
};

constexpr ArchEntry kArchitectures[] = {
    {"llama", load_llama},
    {"qwen2", load_qwen2},
    {"qwen3", load_qwen3},
    {"phi3", load_phi3},
};

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& a : kArchitectures) names.emplace_back(a.name);
  return names;
}

Result<std::unique_ptr<Model>> load_model(std::shared_ptr<const GgufFile> file) {
  POWER_ASSIGN_OR_RETURN(std::string arch, file->get_string("general.architecture"));
  for (const auto& a : kArchitectures) {
    if (arch == a.name) {
      POWER_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, a.load(std::move(file)));
      model->repack_weights();
      return model;
    }
  }
  if (arch == "bert") {
    return Status(StatusCode::kUnsupported,
                  "bert is a text-embedding encoder, not a generative model: use power embed "
                  "or /v1/embeddings")
        .with("architecture", arch);
  }
  std::string known;
  for (const auto& a : kArchitectures) known += (known.empty() ? "" : ", ") + std::string(a.name);
  return Status(StatusCode::kUnsupported, "architecture is not supported")
      .with("architecture", arch)
      .with("supported", known);
}

}  // namespace power
