// The model file as a model package sees it: metadata keys and the tensor table.
//
// Power opens and validates the artifact (GGUF today: bounds, alignment, hostile input) and
// hands the package a ModelFile to read its hyperparameters from. Getters fail with
// kNotFound naming a missing key and kInvalidArgument naming a key of the wrong type; the
// helpers below add ranges and defaults, so that every hyperparameter error names its key.
// Thread-safety: const methods may be called concurrently. The ModelFile lives as long as
// the loaded model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "power/sdk/tensor.h"
#include "power/status.h"

namespace power::sdk {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // ne0 first
  uint64_t offset = 0;         // bytes from the start of the file
  uint64_t n_bytes = 0;
};

class ModelFile {
 public:
  virtual ~ModelFile() = default;

  // general.architecture, the path the file was opened from and its SHA-256 (lowercase hex;
  // empty until the host has hashed it).
  virtual std::string architecture() const = 0;
  virtual std::string path() const = 0;
  virtual std::string sha256() const = 0;

  virtual bool has(std::string_view key) const = 0;
  // Integers of any width and sign (and bools as 0/1); floats of either width; per-layer
  // arrays are kUnsupported for the scalar getters.
  virtual Result<int64_t> get_int(std::string_view key) const = 0;
  virtual Result<double> get_float(std::string_view key) const = 0;
  virtual Result<bool> get_bool(std::string_view key) const = 0;
  virtual Result<std::string> get_string(std::string_view key) const = 0;
  virtual Result<std::vector<int64_t>> get_int_array(std::string_view key) const = 0;
  virtual Result<std::vector<double>> get_float_array(std::string_view key) const = 0;
  virtual Result<std::vector<std::string>> get_string_array(std::string_view key) const = 0;

  // The tensor table (in file order) and lookup by name (null when absent).
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  virtual const TensorInfo* find_tensor(std::string_view name) const = 0;
};

// A required integer key in [lo, hi]; errors name the key.
inline Result<int64_t> int_key(const ModelFile& f, const std::string& key, int64_t lo, int64_t hi) {
  Result<int64_t> v = f.get_int(key);
  if (!v.ok()) return v;
  if (*v < lo || *v > hi) {
    return Status(StatusCode::kInvalidArgument, "metadata value out of range")
        .with("key", key)
        .with("value", *v)
        .with("min", lo)
        .with("max", hi);
  }
  return v;
}

// An optional integer key: `def` when absent, else as int_key.
inline Result<int64_t> int_key_or(const ModelFile& f, const std::string& key, int64_t def,
                                  int64_t lo, int64_t hi) {
  if (!f.has(key)) return def;
  return int_key(f, key, lo, hi);
}

// An optional float key in [lo, hi]: `def` when absent.
inline Result<double> float_key_or(const ModelFile& f, const std::string& key, double def,
                                   double lo, double hi) {
  if (!f.has(key)) return def;
  Result<double> v = f.get_float(key);
  if (!v.ok()) return v;
  if (!(*v >= lo && *v <= hi)) {
    return Status(StatusCode::kInvalidArgument, "metadata value out of range")
        .with("key", key)
        .with("value", *v);
  }
  return v;
}

// A required float key in [lo, hi].
inline Result<double> float_key(const ModelFile& f, const std::string& key, double lo, double hi) {
  if (!f.has(key)) {
    return Status(StatusCode::kNotFound, "missing metadata key").with("key", key);
  }
  return float_key_or(f, key, 0.0, lo, hi);
}

}  // namespace power::sdk
