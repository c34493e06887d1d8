// The models a server has loaded, by id (the name clients put in "model").
//
// An id is the store name for models loaded by name, else the file name without ".gguf".
// Entries are shared_ptr: a request keeps its model alive while it runs even if the model is
// unloaded meanwhile (the runtime frees the model's memory once its last handle goes).
// Thread-safety: all methods may be called from any thread; load() serializes loads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "power/embed.h"
#include "power/runtime.h"

namespace power::server {

struct LoadedModel {
  std::string id;
  std::string source;                         // what was asked for (file or store name)
  ModelHandle handle;                         // generative models
  std::shared_ptr<EmbeddingModel> embedding;  // embedding models (handle is then unused)
  int64_t created = 0;                        // unix seconds of the load
};

class ModelRegistry {
 public:
  ModelRegistry(Runtime* runtime, LoadOptions options,
                std::function<Result<std::string>(const std::string&)> resolve);
  // Loads `file_or_name` (a no-op returning the entry when that id is loaded already).
  Result<std::shared_ptr<LoadedModel>> load(const std::string& file_or_name);
  std::shared_ptr<LoadedModel> find(const std::string& id) const;
  std::vector<std::shared_ptr<LoadedModel>> list() const;
  // kNotFound when not loaded.
  Status unload(const std::string& id);
  static std::string id_for(const std::string& file_or_name);

 private:
  Runtime* runtime_;
  LoadOptions options_;
  std::function<Result<std::string>(const std::string&)> resolve_;
  std::mutex load_mu_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<LoadedModel>> models_;
};

}  // namespace power::server
