// Models by name: resolve a name to verified blob paths for loading, and remove models.
//
// resolve_model() is what a loader calls before mapping weights: it reads the manifest and
// checks every part's blob (it exists, is a regular file of the recorded size; with
// verify_hash also its SHA-256), so a truncated or swapped file is an error, never loaded.
// A name may also be a digest ("sha256:<hex>"), which resolves to that blob alone.
// remove_models() deletes manifests and then every blob no remaining manifest references,
// under the store lock held exclusively (it waits for running pulls).
// Thread-safety: reentrant; cross-process safety comes from atomic renames and the store lock.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "store/blob_store.h"
#include "store/manifest.h"

namespace power::store {

struct ResolvedPart {
  ManifestPart part;
  std::string path;  // blobs/sha256-<hex>
};

struct ResolvedModel {
  Manifest manifest;
  std::vector<ResolvedPart> parts;
  // The first part with this role ("model", "tokenizer"), or nullptr.
  const ResolvedPart* part_with_role(std::string_view role) const;
};

Result<ResolvedModel> resolve_model(const StoreLayout& layout, std::string_view name,
                                    bool verify_hash = false);

struct RemoveResult {
  std::vector<std::string> removed_models;
  GcResult garbage;
};
// Fails without removing anything when a name is not a model. on_wait is called once if
// the store lock is busy (a pull is running) before blocking on it.
Result<RemoveResult> remove_models(const StoreLayout& layout, const std::vector<std::string>& names,
                                   const std::function<void()>& on_wait = {});
// Removes unreferenced blobs only.
Result<GcResult> collect_garbage(const StoreLayout& layout,
                                 const std::function<void()>& on_wait = {});

// "gguf" (magic), "onnx", "safetensors" (extension), "llama2c" (a plausible llama2.c
// header in a .bin file) or "unknown".
std::string detect_format(const std::string& blob_path, std::string_view filename);

}  // namespace power::store
