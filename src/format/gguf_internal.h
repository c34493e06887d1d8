// Helpers shared by the GGUF reader and writer (private to the format layer).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "format/gguf.h"

namespace power::gguf_internal {

// Size in the file of a scalar of this type; 0 for strings and arrays (variable size).
uint64_t fixed_size(GgufValueType t);
// The fewest bytes one value of this type can take in a file: a string is at least its u64
// length, an array at least its u32 element type and u64 count.
uint64_t min_encoded_size(GgufValueType t);
bool is_unsigned_type(GgufValueType t);  // u8/u16/u32/u64 (not bool)
bool is_signed_type(GgufValueType t);    // i8/i16/i32/i64
// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool utf8_valid(std::string_view s);
// The element count of a shape, false unless every dim and the product of the nonzero dims
// fit in int64 (ggml's ne and nelements are int64; products of any subset of dims then cannot
// wrap, so rows() is safe too).
bool shape_elements(std::span<const uint64_t> ne, uint64_t* n_elements);
// Largest array depth we ever recurse into, whatever GgufLimits says.
inline constexpr uint32_t kMaxArrayDepthCap = 64;

}  // namespace power::gguf_internal
