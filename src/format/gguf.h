// GGUF v2/v3 reading and writing (little-endian files only).
//
// GgufFile::open maps a file and parses it as hostile input: every count, length, offset,
// alignment, shape product and type id is checked against the remaining file size with
// overflow-safe arithmetic before anything is allocated. Errors are Status values with the
// byte offset where parsing failed (context "offset") and, where relevant, the key ("key") or
// the tensor name ("tensor"). Codes: kCorrupt for malformed or truncated bytes, kUnsupported
// for GGUF versions other than 2 and 3, big-endian files and tensor type ids outside the ggml
// table (format/ggml_types.h; every id in the table is accepted, whether or not Power can
// dequantize it), kResourceExhausted when the parsed metadata would exceed GgufLimits.
// Tensor data are never copied: a GgufTensor's data points into the mapping (or the caller's
// bytes for parse()), which lives as long as the GgufFile.
//
// Policies for what the spec leaves open (all enforced by the reader, and by the writer):
//  * keys and tensor names: 1..GgufLimits::max_name_bytes bytes of valid UTF-8, unique;
//    string values are raw bytes and are NOT checked for UTF-8 (vocabularies hold byte pieces);
//  * general.alignment, when present, is a u32, a nonzero power of two; default 32;
//  * a tensor has 1..4 dims, each <= INT64_MAX (ggml's ne is int64), and the product of its
//    nonzero dims fits in int64; a dim of 0 is allowed (ggml allows it): a tensor of 0 bytes;
//    ne[0] is a multiple of the type's block size; its offset is a multiple of the alignment;
//    its bytes [offset, offset + n_bytes) lie inside the file and overlap no other tensor's;
//    tensors may appear in any order and need not be packed;
//  * bool values are the byte 0 or 1; arrays nest at most GgufLimits::max_array_depth deep.
//
// GgufWriter lays out a file (metadata, tensor infos, aligned data) and streams it to a
// temporary file in the target's directory, fsyncs it and renames it over the target. It never
// builds the file in memory: with add_tensor_view / add_tensor_deferred it holds at most one
// tensor's bytes at a time. Used by the quantizer and by tests that build models.
//
// Shapes follow ggml: ne[0] is the row length (contiguous), ne[1] the number of rows, ...
// Thread-safety: a GgufFile is immutable after open and may be read from any thread. A
// GgufWriter is used by one thread at a time.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
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

namespace gguf_internal {
class Sink;  // where GgufWriter's bytes go (gguf_writer.cpp)
}  // namespace gguf_internal

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;
inline constexpr std::string_view kGgufAlignmentKey = "general.alignment";

// Caps on what a hostile file can make the reader allocate or recurse into.
struct GgufLimits {
  // In-memory size of the parsed metadata and tensor infos (values, strings, names), counted
  // before allocating. A 256k-token vocabulary with scores and types needs tens of MiB.
  uint64_t max_metadata_bytes = uint64_t{1} << 30;
  // Nesting of arrays: 1 = a flat array, 2 = an array of arrays, ... (clamped to 64).
  uint32_t max_array_depth = 8;
  // Bytes of a key or a tensor name (the spec caps keys at 65535).
  uint64_t max_name_bytes = 65535;
};

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
// False for ids outside the enum.
bool gguf_value_type_valid(uint32_t id);

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

  bool is_integer() const;  // any of the 8 integer types (not bool)
  bool is_float() const {
    return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
  }
  // Conversions that fail (nullopt) instead of truncating or changing sign. as_u64/as_i64
  // take integer types only; as_bool takes kBool only.
  std::optional<uint64_t> as_u64() const;
  std::optional<int64_t> as_i64() const;
  std::optional<double> as_f64() const;  // floats and integers
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const std::vector<GgufValue>* as_array() const;

  // Structural equality (type, element type, value); NaN != NaN as for double.
  friend bool operator==(const GgufValue&, const GgufValue&) = default;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
  friend bool operator==(const GgufKeyValue&, const GgufKeyValue&) = default;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;       // 1..4 dims, ne[0] contiguous
  uint64_t offset = 0;            // relative to the start of the data section
  uint64_t file_offset = 0;       // absolute byte offset in the file
  uint64_t n_bytes = 0;           // checked: fits inside the file
  const uint8_t* data = nullptr;  // into the mapping; n_bytes readable bytes
  uint64_t n_elements() const;
  uint64_t rows() const;  // product of ne[1..]
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(n_bytes)}; }
};

class GgufFile {
 public:
  // Opens and validates a file. The mapping stays open for the GgufFile's lifetime.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path,
                                                const GgufLimits& limits = {});
  // Parses bytes that another owner produced in a MappedFile (decrypted weights in locked
  // memory: secure/container.h), keeping it for the GgufFile's lifetime.
  static Result<std::unique_ptr<GgufFile>> open(MappedFile mapping, const GgufLimits& limits = {});
  // Parses bytes owned by the caller (fuzzing, tests). The caller keeps them alive.
  static Result<std::unique_ptr<GgufFile>> parse(std::span<const uint8_t> bytes,
                                                 const GgufLimits& limits = {});

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section
  uint64_t file_size() const { return bytes_.size(); }
  std::span<const uint8_t> bytes() const { return bytes_; }
  const std::string& path() const { return mapping_.path(); }  // empty for parse()
  const MappedFile& mapping() const { return mapping_; }

  const std::vector<GgufKeyValue>& metadata() const { return kv_; }    // in file order
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order

  const GgufValue* find(std::string_view key) const;
  const GgufTensor* find_tensor(std::string_view name) const;

  // Typed lookups: not_found if absent, invalid_argument naming the key if the type differs.
  Result<std::string> get_string(std::string_view key) const;
  Result<uint64_t> get_u64(std::string_view key) const;  // any non-negative integer type
  Result<int64_t> get_i64(std::string_view key) const;   // any integer type that fits
  Result<double> get_f64(std::string_view key) const;    // any numeric type
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

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
// order added, each at an offset aligned to `alignment` and padded to it (as llama.cpp does).
// general.alignment is written when the alignment is not the default 32; a caller may also
// set it, but only to the writer's alignment (as a u32). Invalid keys or values (a value whose
// variant does not match its type, an integer outside its width, a finite double outside the
// f32 range for kFloat32, mixed arrays, nesting too deep) and an invalid alignment are reported
// by serialize()/write(), which check everything before writing a byte.
class GgufWriter {
 public:
  // Fills `out` (exactly the tensor's byte size) with the tensor's data.
  using TensorFill = std::function<Status(std::span<uint8_t> out)>;

  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  // Sets (or replaces) a metadata key, keeping the position of the first set.
  void set(std::string key, GgufValue value);

  // Adds a tensor that the writer owns; `data` must hold exactly the bytes the type and shape
  // need. Fails (invalid_argument naming the tensor) on a duplicate or invalid name, 0 or more
  // than 4 dims, an ne[0] that is not a multiple of the block size, or a size mismatch.
  Status add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne,
                    std::vector<uint8_t> data);
  // The same without a copy: the caller keeps `data` alive and unchanged until the last
  // serialize()/write() returns (e.g. a tensor of a mapped GgufFile).
  Status add_tensor_view(std::string name, GgmlType type, std::vector<uint64_t> ne,
                         std::span<const uint8_t> data);
  // The data are produced at write time by `fill`, one tensor at a time in file order, so a
  // quantizer holds one output tensor in memory, not the whole model. `fill` is called once
  // per serialize()/write(); its error aborts the write (the target is left untouched).
  Status add_tensor_deferred(std::string name, GgmlType type, std::vector<uint64_t> ne,
                             TensorFill fill);

  uint32_t alignment() const { return alignment_; }
  size_t tensor_count() const { return tensors_.size(); }

  // The complete file in memory (small files: tests, fuzz seeds).
  Result<std::vector<uint8_t>> serialize() const;
  // Streams the file to `path` + ".tmp-*" in the same directory, fsyncs, renames it over
  // `path` and fsyncs the directory. On error the temporary file is removed and `path` is
  // unchanged.
  Status write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    uint64_t n_bytes = 0;
    std::vector<uint8_t> owned;     // add_tensor
    std::span<const uint8_t> view;  // add_tensor_view
    TensorFill fill;                // add_tensor_deferred (when set, owned/view are unused)
    bool is_owned = false;
  };
  Status check_new_tensor(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne,
                          uint64_t* n_bytes) const;
  Status add_pending(PendingTensor t);
  Status validate() const;
  Status emit(gguf_internal::Sink& sink) const;

  uint32_t alignment_;
  std::vector<GgufKeyValue> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<PendingTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace power
