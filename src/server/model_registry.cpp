#include "server/model_registry.h"

#include <chrono>

namespace power::server {

ModelRegistry::ModelRegistry(Runtime* runtime, LoadOptions options,
                             std::function<Result<std::string>(const std::string&)> resolve)
    : runtime_(runtime), options_(std::move(options)), resolve_(std::move(resolve)) {}

std::string ModelRegistry::id_for(const std::string& file_or_name) {
  std::string id = file_or_name;
  size_t slash = id.find_last_of('/');
  bool is_path = slash != std::string::npos && (id.ends_with(".gguf") || id.front() == '/' ||
                                                id.starts_with("./") || id.starts_with("../"));
  if (is_path) id = id.substr(slash + 1);
  if (id.ends_with(".gguf")) id.resize(id.size() - 5);
  return id;
}

Result<std::shared_ptr<LoadedModel>> ModelRegistry::load(const std::string& file_or_name) {
  std::lock_guard<std::mutex> load_lock(load_mu_);
  std::string id = id_for(file_or_name);
  if (auto m = find(id)) return m;
  std::string path = file_or_name;
  if (resolve_) {
    POWER_ASSIGN_OR_RETURN(path, resolve_(file_or_name));
  }
  auto m = std::make_shared<LoadedModel>();
  EmbedOptions eo;  // microbatched: concurrent /v1/embeddings requests share passes
  eo.model_key_file = options_.model_key_file;
  eo.model_key_hex = options_.model_key_hex;
  eo.require_mlock = options_.require_mlock;
  if (is_embedding_model_file(path, eo)) {
    eo.threads = options_.threads;
    eo.memory_budget_bytes = runtime_->budget_bytes();
    POWER_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingModel> em, EmbeddingModel::open(path, eo));
    m->embedding = std::move(em);
  } else {
    POWER_ASSIGN_OR_RETURN(m->handle, runtime_->load(path, options_));
  }
  m->id = id;
  m->source = file_or_name;
  m->created = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  std::lock_guard<std::mutex> lk(mu_);
  models_.push_back(m);
  return m;
}

std::shared_ptr<LoadedModel> ModelRegistry::find(const std::string& id) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& m : models_) {
    if (m->id == id) return m;
  }
  return nullptr;
}

std::vector<std::shared_ptr<LoadedModel>> ModelRegistry::list() const {
  std::lock_guard<std::mutex> lk(mu_);
  return models_;
}

Status ModelRegistry::unload(const std::string& id) {
  std::shared_ptr<LoadedModel> gone;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = models_.begin(); it != models_.end(); ++it) {
      if ((*it)->id == id) {
        gone = *it;
        models_.erase(it);
        break;
      }
    }
  }
  if (!gone) return Status(StatusCode::kNotFound, "model not loaded").with("model", id);
  if (gone->embedding) return Status();  // freed when the last request holding it ends
  return runtime_->unload(gone->handle);
}

}  // namespace power::server
