// GGUF v2/v3 reading and writing.
//
// GgufFile::open maps a file and parses it as hostile input: every count, length, offset,
// alignment, shape product and type id is checked against the file size with overflow-safe
// arithmetic before use. Errors are Status values with the byte offset where parsing failed
// (context "offset") and, for tensors, the tensor name. Tensor data are never copied: a
// GgufTensor's data points into the mapping, which lives as long as the GgufFile.
// Unknown or unsupported tensor types are an error naming the tensor.
//
// GgufWriter builds a file in memory order (metadata, tensor infos, aligned data) and writes it
// atomically (base/file.h). Used by the quantizer and by tests that build models.
//
// Shapes follow ggml: ne[0] is the row length (contiguous), ne[1] the number of rows, ...
// Thread-safety: a GgufFile is immutable after open and may be read from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/file.h"
#include "base/status.h"
#include "format/ggml_types.h"

namespace power {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;

// GGUF metadata value types (gguf spec, enum gguf_metadata_value_type).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);

// One metadata value. Arrays are homogeneous; arrays of arrays are allowed by the spec and
// kept as nested GgufValue. Integers keep their declared width in `type`.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  // Scalars: uint64 for unsigned and bool, int64 for signed, double for floats.
  std::variant<uint64_t, int64_t, double, std::string, std::vector<GgufValue>> v;
  GgufValueType array_type = GgufValueType::kUint8;  // element type when type == kArray

  static GgufValue u8(uint8_t x) { return {GgufValueType::kUint8, uint64_t{x}}; }
  static GgufValue i8(int8_t x) { return {GgufValueType::kInt8, int64_t{x}}; }
  static GgufValue u16(uint16_t x) { return {GgufValueType::kUint16, uint64_t{x}}; }
  static GgufValue i16(int16_t x) { return {GgufValueType::kInt16, int64_t{x}}; }
  static GgufValue u32(uint32_t x) { return {GgufValueType::kUint32, uint64_t{x}}; }
  static GgufValue i32(int32_t x) { return {GgufValueType::kInt32, int64_t{x}}; }
  static GgufValue u64(uint64_t x) { return {GgufValueType::kUint64, x}; }
  static GgufValue i64(int64_t x) { return {GgufValueType::kInt64, x}; }
  static GgufValue f32(float x) { return {GgufValueType::kFloat32, double{x}}; }
  static GgufValue f64(double x) { return {GgufValueType::kFloat64, x}; }
  static GgufValue boolean(bool x) { return {GgufValueType::kBool, uint64_t{x ? 1u : 0u}}; }
  static GgufValue str(std::string s) { return {GgufValueType::kString, std::move(s)}; }
  static GgufValue array(GgufValueType elem, std::vector<GgufValue> items);
  static GgufValue string_array(const std::vector<std::string>& items);

  bool is_integer() const;  // any of the 8 integer types or bool
  bool is_float() const { return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64; }
  // Conversions that fail (nullopt) instead of truncating or changing sign.
  std::optional<uint64_t> as_u64() const;
  std::optional<int64_t> as_i64() const;
  std::optional<double> as_f64() const;  // floats and integers
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const std::vector<GgufValue>* as_array() const;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;        // 1..4 dims, ne[0] contiguous
  uint64_t offset = 0;             // relative to the start of the data section
  uint64_t file_offset = 0;        // absolute byte offset in the file
  uint64_t n_bytes = 0;            // checked: fits inside the file
  const uint8_t* data = nullptr;   // into the mapping
  uint64_t n_elements() const;
  uint64_t rows() const;           // product of ne[1..]
};

class GgufFile {
 public:
  // Opens and validates a file. The mapping stays open for the GgufFile's lifetime.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses bytes owned by the caller (fuzzing, tests). The caller keeps them alive.
  static Result<std::unique_ptr<GgufFile>> parse(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section
  uint64_t file_size() const { return bytes_.size(); }
  std::span<const uint8_t> bytes() const { return bytes_; }
  const std::string& path() const { return mapping_.path(); }
  const MappedFile& mapping() const { return mapping_; }

  const std::vector<GgufKeyValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  const GgufValue* find(std::string_view key) const;
  const GgufTensor* find_tensor(std::string_view name) const;

  // Typed lookups: not_found if absent, invalid_argument naming the key if the type differs.
  Result<std::string> get_string(std::string_view key) const;
  Result<uint64_t> get_u64(std::string_view key) const;  // any non-negative integer type
  Result<int64_t> get_i64(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;    // any numeric type
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;

 private:
  GgufFile() = default;
  Status parse_all();

  MappedFile mapping_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file. Keys and tensor names must be unique; tensors are laid out in the
// order added, each at an offset aligned to `alignment` (general.alignment is written when
// it is not the default 32).
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  // Sets (or replaces) a metadata key, keeping the position of the first set.
  void set(std::string key, GgufValue value);
  // Adds a tensor; `data` must hold exactly the bytes the type and shape need.
  Status add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne,
                    std::vector<uint8_t> data);

  // The complete file.
  Result<std::vector<uint8_t>> serialize() const;
  // serialize() then write_file_atomic().
  Status write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    std::vector<uint8_t> data;
  };
  uint32_t alignment_;
  std::vector<GgufKeyValue> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace power
