// The architecture registry: every package Power can run, in one table.
//
// The built-in packages (src/models/) are added by one visible call,
// models::register_builtin_architectures(), the first time the registry is used; a program
// adds its own with sdk::register_architecture(), and `--model-lib` adds a plugin's with
// load_model_library(). Names are unique: adding one that exists is kAlreadyExists.
// Plugins: the library is opened with dlopen, its power_model_plugin() entry point is asked
// for the SDK version it was built against, and a version other than this build's is refused
// (kUnsupported naming both) before any of its code registers anything. A library is loaded
// once per process (by canonical path) and never unloaded.
// Thread-safety: all functions may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "power/sdk/registry.h"

namespace power {

struct ArchitectureEntry {
  sdk::Architecture arch;
  std::string origin;  // "built-in", "in-process" or the plugin's path
};

class ArchitectureRegistry final : public sdk::Registry {
 public:
  // The process-wide registry (built-ins added on first use).
  static ArchitectureRegistry& global();

  Status add(sdk::Architecture arch) override;
  // Adds with an origin (plugins name their library).
  Status add_from(sdk::Architecture arch, const std::string& origin);
  std::shared_ptr<const ArchitectureEntry> find(const std::string& name) const;
  std::vector<std::shared_ptr<const ArchitectureEntry>> entries() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const ArchitectureEntry>> entries_;
};

// Loads a model plugin (see above). Loading the same library again is a no-op.
Status load_model_library(const std::string& path);

// Names of the registered architectures, for --help and errors.
std::vector<std::string> supported_architectures();

}  // namespace power
