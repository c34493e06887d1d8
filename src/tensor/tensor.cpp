#include "tensor/tensor.h"

#include "base/checked.h"

namespace power {

Result<TensorView> TensorView::contiguous(GgmlType type, std::span<const int64_t> shape,
                                          const void* data, uint64_t size_bytes) {
  if (shape.empty() || shape.size() > 4) {
    return make_error(StatusCode::kInvalidArgument, "tensor rank must be 1..4, got {}",
                      shape.size());
  }
  const GgmlTypeInfo& info = ggml_type_info(type);
  TensorView v;
  v.type = type;
  v.data = data;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return make_error(StatusCode::kInvalidArgument, "negative dimension ne{} = {}", i, shape[i]);
    }
    v.ne[i] = shape[i];
  }
  if (v.ne[0] % info.block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "row length {} is not a multiple of the {} block size {}", v.ne[0], info.name,
                      info.block_elems);
  }
  v.nb[0] = info.block_bytes;
  uint64_t stride = 0;
  if (!checked_mul<uint64_t>(static_cast<uint64_t>(v.ne[0]) / info.block_elems, info.block_bytes,
                             &stride)) {
    return make_error(StatusCode::kOutOfRange, "tensor row size overflows");
  }
  for (int i = 1; i < 4; ++i) {
    v.nb[i] = stride;
    if (!checked_mul<uint64_t>(stride, static_cast<uint64_t>(v.ne[i]), &stride)) {
      return make_error(StatusCode::kOutOfRange, "tensor byte size overflows");
    }
  }
  if (stride > size_bytes) {
    return make_error(StatusCode::kOutOfRange, "tensor needs {} bytes, buffer has {}", stride,
                      size_bytes);
  }
  return v;
}

uint64_t TensorView::row_bytes() const {
  const GgmlTypeInfo& info = ggml_type_info(type);
  return static_cast<uint64_t>(ne[0]) / info.block_elems * info.block_bytes;
}

bool TensorView::is_contiguous() const {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (nb[0] != info.block_bytes || nb[1] != row_bytes()) return false;
  return nb[2] == nb[1] * static_cast<uint64_t>(ne[1]) &&
         nb[3] == nb[2] * static_cast<uint64_t>(ne[2]);
}

const uint8_t* TensorView::row(int64_t i1, int64_t i2, int64_t i3) const {
  POWER_CHECK(i1 >= 0 && i1 < ne[1] && i2 >= 0 && i2 < ne[2] && i3 >= 0 && i3 < ne[3]);
  return static_cast<const uint8_t*>(data) + static_cast<uint64_t>(i1) * nb[1] +
         static_cast<uint64_t>(i2) * nb[2] + static_cast<uint64_t>(i3) * nb[3];
}

}  // namespace power
