#include "host/registry.h"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <set>

#include "base/status.h"
#include "models/builtin.h"
#include "power/sdk/plugin.h"

namespace power {
namespace {

std::string version_text(uint32_t v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000);
}

// The registry a plugin's register function sees: adds with the library as origin.
class PluginRegistry final : public sdk::Registry {
 public:
  PluginRegistry(ArchitectureRegistry& reg, std::string origin)
      : reg_(reg), origin_(std::move(origin)) {}
  Status add(sdk::Architecture arch) override { return reg_.add_from(std::move(arch), origin_); }

 private:
  ArchitectureRegistry& reg_;
  std::string origin_;
};

}  // namespace

ArchitectureRegistry& ArchitectureRegistry::global() {
  static ArchitectureRegistry* reg = [] {
    auto* r = new ArchitectureRegistry();
    PluginRegistry builtin(*r, "built-in");
    Status st = models::register_builtin_architectures(builtin);
    POWER_CHECK_MSG(st.ok(), "the built-in architectures must register");
    return r;
  }();
  return *reg;
}

Status ArchitectureRegistry::add(sdk::Architecture arch) {
  return add_from(std::move(arch), "in-process");
}

Status ArchitectureRegistry::add_from(sdk::Architecture arch, const std::string& origin) {
  if (arch.name.empty() || !arch.create) {
    return Status(StatusCode::kInvalidArgument,
                  "an architecture needs a name and a create function")
        .with("origin", origin);
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& e : entries_) {
    if (e->arch.name == arch.name) {
      return Status(StatusCode::kAlreadyExists, "architecture is already registered")
          .with("architecture", arch.name)
          .with("registered_by", e->origin)
          .with("refused_from", origin);
    }
  }
  auto entry = std::make_shared<ArchitectureEntry>();
  entry->arch = std::move(arch);
  entry->origin = origin;
  entries_.push_back(std::move(entry));
  return Status();
}

std::shared_ptr<const ArchitectureEntry> ArchitectureRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& e : entries_) {
    if (e->arch.name == name) return e;
  }
  return nullptr;
}

std::vector<std::shared_ptr<const ArchitectureEntry>> ArchitectureRegistry::entries() const {
  std::lock_guard<std::mutex> lk(mu_);
  return entries_;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& e : ArchitectureRegistry::global().entries()) names.push_back(e->arch.name);
  return names;
}

Status load_model_library(const std::string& path) {
  static std::mutex mu;
  static std::set<std::string> loaded;
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) {
    return Status(StatusCode::kNotFound, "model library not found").with("path", path);
  }
  const std::string canonical = resolved;
  ArchitectureRegistry& reg = ArchitectureRegistry::global();
  std::lock_guard<std::mutex> lk(mu);
  if (loaded.count(canonical) != 0) return Status();
  void* handle = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return Status(StatusCode::kInvalidArgument, "cannot load the model library")
        .with("path", path)
        .with("error", err != nullptr ? err : "unknown");
  }
  using Entry = const sdk::PluginInfo* (*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, POWER_MODEL_PLUGIN_ENTRY));
  if (entry == nullptr) {
    ::dlclose(handle);
    return Status(StatusCode::kInvalidArgument,
                  "not a Power model library: it exports no " POWER_MODEL_PLUGIN_ENTRY "()")
        .with("path", path);
  }
  const sdk::PluginInfo* info = entry();
  if (info == nullptr || info->sdk_version != sdk::kVersion) {
    const uint32_t theirs = info != nullptr ? info->sdk_version : 0;
    ::dlclose(handle);
    return Status(StatusCode::kUnsupported,
                  "the model library was built against another SDK version")
        .with("path", path)
        .with("library_sdk", version_text(theirs))
        .with("power_sdk", version_text(sdk::kVersion));
  }
  if (info->register_architectures == nullptr) {
    ::dlclose(handle);
    return Status(StatusCode::kInvalidArgument, "the model library registers nothing")
        .with("path", path);
  }
  // From here the library stays loaded: what it registered points into it.
  loaded.insert(canonical);
  PluginRegistry plugin_reg(reg, canonical);
  Status st = info->register_architectures(plugin_reg);
  if (!st.ok()) return st.with("path", path);
  return Status();
}

namespace sdk {

Status register_architecture(Architecture arch) {
  return ArchitectureRegistry::global().add(std::move(arch));
}

Status load_model_library(const std::string& path) {
  return power::load_model_library(path);
}

}  // namespace sdk
}  // namespace power
