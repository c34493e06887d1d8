// TensorView: a small non-owning view of a tensor's bytes (mapped file or owned buffer).
//
// Dimension convention, the one used everywhere in Power (it is ggml's and GGUF's):
//   ne[0] is the row length and is contiguous in memory; ne[1] is the number of rows; ne[2]
//   and ne[3] are outer batch dimensions. Unused dimensions are 1. Shapes are written
//   [ne0, ne1, ...]. A weight matrix W used as y = W·x with x of length K and y of length N
//   has ne = {K, N, 1, 1}: row r holds the K weights of output r, so y[r] = dot(row r, x).
// Strides nb[] are in bytes, as in ggml: nb[0] = bytes of one block (quantized types store
//   ne[0] as ne[0]/block_elems blocks; plain types have 1-element blocks), nb[1] = bytes from
//   one row to the next, nb[2] and nb[3] for the outer dimensions.
// Ownership: the view never owns `data`; whoever created it keeps the bytes alive.
// Thread-safety: a value type; concurrent reads are fine.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "base/status.h"
#include "format/ggml_types.h"

namespace power {

struct TensorView {
  GgmlType type = GgmlType::F32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};   // elements per dimension
  std::array<uint64_t, 4> nb{0, 0, 0, 0};  // byte strides (nb[0] = bytes per block)
  const void* data = nullptr;

  // A contiguous (densely packed, row-major in the convention above) view. `shape` has 1 to 4
  // entries, ne0 first. Fails on a negative dimension, ne0 not a multiple of the type's block
  // size, byte-size overflow, or `size_bytes` smaller than the tensor.
  static Result<TensorView> contiguous(GgmlType type, std::span<const int64_t> shape,
                                       const void* data, uint64_t size_bytes);

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes of one row of ne[0] elements.
  uint64_t row_bytes() const;
  // True when rows follow each other without gaps (nb as contiguous() builds them).
  bool is_contiguous() const;
  // Start of row (i1, i2, i3); indices are checked (POWER_CHECK): a bad index is a caller bug.
  const uint8_t* row(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const;
};

}  // namespace power
