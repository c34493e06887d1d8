// Weight types and the handle a model holds for each tensor it bound.
//
// Dimension convention (GGUF's and ggml's, used everywhere in Power): ne[0] is the row length
// and contiguous; ne[1] the number of rows; ne[2], ne[3] outer dimensions; unused ones are 1.
// A matrix W used as y = W x with x of length K and y of length N has ne = {K, N}: row r holds
// the K weights of output r. Shapes are written [ne0, ne1, ...].
// A Weight is a value: the host owns what it points to for as long as the model is loaded.
// Thread-safety: values.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace power::sdk {

// Tensor types, numbered as GGUF numbers them (ggml's enum ggml_type).
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

inline std::string dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::Q4_0:
      return "Q4_0";
    case DType::Q4_1:
      return "Q4_1";
    case DType::Q5_0:
      return "Q5_0";
    case DType::Q5_1:
      return "Q5_1";
    case DType::Q8_0:
      return "Q8_0";
    case DType::Q8_1:
      return "Q8_1";
    case DType::Q2_K:
      return "Q2_K";
    case DType::Q3_K:
      return "Q3_K";
    case DType::Q4_K:
      return "Q4_K";
    case DType::Q5_K:
      return "Q5_K";
    case DType::Q6_K:
      return "Q6_K";
    case DType::Q8_K:
      return "Q8_K";
    case DType::IQ4_NL:
      return "IQ4_NL";
    case DType::IQ4_XS:
      return "IQ4_XS";
    case DType::I8:
      return "I8";
    case DType::I16:
      return "I16";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
  }
  return "type" + std::to_string(static_cast<uint32_t>(t));
}

// A set of types (GGUF ids below 64), for the types a model accepts for a tensor.
class TypeSet {
 public:
  constexpr TypeSet() = default;
  constexpr TypeSet(std::initializer_list<DType> types) {
    for (DType t : types) bits_ |= bit(t);
  }
  // Every type: the device decides (it refuses those it cannot compute with).
  static constexpr TypeSet any() { return TypeSet(~uint64_t{0}); }
  static constexpr TypeSet floats() { return TypeSet{DType::F32, DType::F16, DType::BF16}; }
  constexpr bool contains(DType t) const { return (bits_ & bit(t)) != 0; }
  constexpr bool is_any() const { return bits_ == ~uint64_t{0}; }
  std::string names() const {
    if (is_any()) return "any";
    std::string s;
    for (uint32_t id = 0; id < 64; ++id) {
      if ((bits_ >> id) & 1) s += (s.empty() ? "" : "|") + dtype_name(static_cast<DType>(id));
    }
    return s;
  }

 private:
  explicit constexpr TypeSet(uint64_t bits) : bits_(bits) {}
  static constexpr uint64_t bit(DType t) {
    const auto id = static_cast<uint32_t>(t);
    return id < 64 ? uint64_t{1} << id : 0;
  }
  uint64_t bits_ = 0;
};

// A bound tensor. `handle` is the host's (null: an optional tensor the file does not have);
// dtype and ne are the tensor's as stored, so a model can read a size off a bound shape
// (e.g. the vocabulary from the token embedding's ne[1]).
struct Weight {
  const void* handle = nullptr;
  DType dtype = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};

  explicit operator bool() const { return handle != nullptr; }
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

// A tensor's identity, what receipts bind: the artifact it came from (SHA-256 of the file,
// lowercase hex), its name, type, shape, and where its bytes are (offset from the file's
// start, length).
struct TensorIdentity {
  std::string artifact_sha256;
  std::string name;
  DType dtype = DType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  uint64_t offset = 0;
  uint64_t n_bytes = 0;
};

}  // namespace power::sdk
