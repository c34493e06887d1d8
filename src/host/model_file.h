// GgufModelFile: a GGUF file as the SDK's ModelFile (power/sdk/file.h): the metadata getters
// with their errors naming the key, and the tensor table with each tensor's offset from the
// start of the file.
// Thread-safety: immutable; the GgufFile must outlive it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "power/sdk/file.h"

namespace power {

sdk::DType to_sdk(GgmlType t);
GgmlType from_sdk(sdk::DType t);

class GgufModelFile final : public sdk::ModelFile {
 public:
  GgufModelFile(std::shared_ptr<const GgufFile> file, std::string sha256_hex);

  std::string architecture() const override;
  std::string path() const override { return file_->path(); }
  std::string sha256() const override { return sha256_; }
  bool has(std::string_view key) const override { return file_->find(key) != nullptr; }
  Result<int64_t> get_int(std::string_view key) const override;
  Result<double> get_float(std::string_view key) const override;
  Result<bool> get_bool(std::string_view key) const override;
  Result<std::string> get_string(std::string_view key) const override;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const override;
  Result<std::vector<double>> get_float_array(std::string_view key) const override;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const override;
  const std::vector<sdk::TensorInfo>& tensors() const override { return tensors_; }
  const sdk::TensorInfo* find_tensor(std::string_view name) const override;

  const GgufFile& gguf() const { return *file_; }

 private:
  std::shared_ptr<const GgufFile> file_;
  std::string sha256_;
  std::vector<sdk::TensorInfo> tensors_;
};

}  // namespace power
