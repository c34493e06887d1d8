// ONNX tensors as the executor sees them: an element type, a shape and a shared byte buffer.
//
// Buffers are immutable once a kernel has produced them, so Identity/Reshape/Squeeze share the
// producer's bytes instead of copying, and initializers are shared by every run of a graph.
// Thread-safety: a Tensor is a value; its buffer is read-only after construction.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace power::onnx {

// The element types the executor stores (ONNX TensorProto.DataType codes).
enum class DType : int32_t {
  kF32 = 1,
  kU8 = 2,
  kI8 = 3,
  kU16 = 4,
  kI16 = 5,
  kI32 = 6,
  kI64 = 7,
  kBool = 9,
  kF64 = 11,
};

// True for the ONNX type codes above; false for strings, float16, complex, ...
bool dtype_supported(int32_t onnx_type);
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);

using Shape = std::vector<int64_t>;

// An allocator whose value-less construct() default-initializes, so growing a byte vector
// leaves the new bytes as they are instead of zeroing them: kernels that write every element
// of their output then touch its memory once, not twice.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};

// A tensor's bytes. Bytes(n) and resize(n) leave new bytes unspecified; Bytes(n, 0) zeroes.
using Bytes = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

// Element count of a shape; -1 when a dimension is negative or the product overflows 2^62.
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

struct Tensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::shared_ptr<Bytes> buf;  // numel * dtype_size bytes

  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return buf ? buf->size() : 0; }
  int rank() const { return static_cast<int>(shape.size()); }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(buf->data());
  }
  template <typename T>
  T* mutable_data() {
    return reinterpret_cast<T*>(buf->data());
  }
  // A tensor sharing this one's bytes with another shape of the same element count.
  Tensor reshaped(Shape s) const {
    Tensor t = *this;
    t.shape = std::move(s);
    return t;
  }
};

// Recycles the byte buffers of one model's intermediates between and within runs, so a model
// run again and again (a VAD stream, OCR pages) does not map, fault in and zero fresh pages for
// every tensor. A buffer whose last Tensor goes away returns here instead of to the allocator;
// idle, the pool keeps at most cap() = kPeaksHeld x the most bytes it has had out at once (the
// model's live intermediates and kernel scratch), the least recently returned dropped first.
// Thread-safe; Tensors may outlive the Model (a buffer then goes back to the allocator).
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static constexpr int64_t kPeaksHeld = 4;
  static std::shared_ptr<BufferPool> create() {
    return std::shared_ptr<BufferPool>(new BufferPool());
  }
  // A buffer of n bytes: a held one of n's size class, with stale contents unless `zero`, else
  // a new zeroed one.
  std::shared_ptr<Bytes> take(size_t n, bool zero);
  int64_t cap() const;
  int64_t held_bytes() const;
  static size_t size_class(size_t n);

 private:
  BufferPool() = default;
  void give(Bytes* v);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Bytes>> free_;  // least recently returned first
  int64_t held_ = 0;                          // idle bytes in free_
  int64_t out_ = 0;                           // bytes of buffers taken and not yet returned
  int64_t peak_ = 0;                          // the most out_ has been
};

// While it lives, make_tensor and make_tensor_uninit on this thread take buffers from `pool`
// (Model::run sets one around its kernels; worker threads and other callers allocate afresh).
class BufferScope {
 public:
  explicit BufferScope(BufferPool* pool);
  ~BufferScope();
  BufferScope(const BufferScope&) = delete;
  BufferScope& operator=(const BufferScope&) = delete;

 private:
  BufferPool* prev_;
};

// A zero-filled tensor. Fails (kResourceExhausted) beyond the per-tensor cap (4 GiB), or for
// negative dimensions (kInvalidArgument).
Result<Tensor> make_tensor(DType t, Shape shape);
// The same, contents unspecified when the buffer is recycled: for kernels that write every
// element of their output.
Result<Tensor> make_tensor_uninit(DType t, Shape shape);
Tensor make_f32(Shape shape, const std::vector<float>& values);
Tensor make_i64(Shape shape, const std::vector<int64_t>& values);
Tensor scalar_f32(float v);
Tensor scalar_i64(int64_t v);

// Reads any integer tensor (I64/I32/I16/I8/U8/U16/Bool) as int64 values.
Result<std::vector<int64_t>> to_i64_vector(const Tensor& t);
// Reads any numeric tensor as double values.
Result<std::vector<double>> to_f64_vector(const Tensor& t);

}  // namespace power::onnx
