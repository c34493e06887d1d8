#include "cli/cli_util.h"

#include "cli/commands.h"

#include <deque>
#include <vector>

#include <CLI/CLI.hpp>

#include "power/sdk/registry.h"

#include <sys/stat.h>

#if POWER_WITH_STORE
#include "store/layout.h"
#include "store/models.h"
#endif

namespace power::cli {

void add_mirror_options(CLI::App* cmd, std::string* dir, std::string* bytes) {
  cmd->add_option("--mirror-dir", *dir,
                  "Fast local directory for a partial mirror of streamed weights, built at the "
                  "first load that streams (docs/RESIDENCY.md)");
  cmd->add_option("--mirror-bytes", *bytes,
                  "Cap on the mirror's bytes (20G, 1.5GiB; default: the disk's free space less "
                  "1 GiB)");
}

void add_weights_cache_options(CLI::App* cmd, std::string* bytes, std::string* policy) {
  cmd->add_option("--weights-cache", *bytes,
                  "Bytes of a cache for token-embedding rows of models whose weights stream "
                  "(64M, 1GiB; default none: rows from the mapping)");
  cmd->add_option("--weights-cache-policy", *policy, "lfru (default) or lru")
      ->check(CLI::IsMember({"lfru", "lru"}));
}

void add_model_lib_option(CLI::App* cmd) {
  static std::deque<std::vector<std::string>> libs;  // one list per command, for the process
  std::vector<std::string>& mine = libs.emplace_back();
  cmd->add_option("--model-lib", mine,
                  "Model plugin (.so) adding architectures (repeatable; docs/SDK.md)");
  cmd->parse_complete_callback([&mine] {
    for (const std::string& lib : mine) {
      Status st = sdk::load_model_library(lib);
      if (!st.ok()) {
        report_error(st);
        throw CLI::RuntimeError(1);
      }
    }
  });
}

void report_error(const Status& status) {
  std::fprintf(stderr, "power: error: %s\n", status.to_string().c_str());
  set_exit_code(1);
}

Result<std::string> resolve_model_path(const std::string& file_or_name) {
  struct stat st {};
  if (::stat(file_or_name.c_str(), &st) == 0) return file_or_name;
#if POWER_WITH_STORE
  POWER_ASSIGN_OR_RETURN(store::StoreLayout layout, store::StoreLayout::open_default());
  auto resolved = store::resolve_model(layout, file_or_name, /*verify_hash=*/false);
  if (!resolved.ok()) {
    if (resolved.status().code() != StatusCode::kNotFound &&
        resolved.status().code() != StatusCode::kInvalidArgument) {
      return resolved.status();
    }
    return Status(StatusCode::kNotFound, "no such file, and no such model in the store")
        .with("model", file_or_name)
        .with("store", layout.home());
  }
  const store::ResolvedPart* part = resolved->part_with_role("model");
  if (part == nullptr) {
    return Status(StatusCode::kInvalidArgument, "the stored model has no part with role 'model'")
        .with("model", file_or_name);
  }
  return part->path;
#else
  return Status(StatusCode::kNotFound, "no such file").with("path", file_or_name);
#endif
}

}  // namespace power::cli
