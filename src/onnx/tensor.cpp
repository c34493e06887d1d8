#include "onnx/tensor.h"

#include <algorithm>
#include <limits>

namespace power::onnx {

bool dtype_supported(int32_t t) {
  switch (t) {
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
    case 7:
    case 9:
    case 11:
      return true;
    default:
      return false;
  }
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kU8:
      return 1;
    case DType::kI8:
      return 1;
    case DType::kU16:
      return 2;
    case DType::kI16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kF64:
      return 8;
  }
  return 1;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kU8:
      return "uint8";
    case DType::kI8:
      return "int8";
    case DType::kU16:
      return "uint16";
    case DType::kI16:
      return "int16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kF64:
      return "float64";
  }
  return "?";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d != 0 && n > (int64_t{1} << 62) / d) return -1;
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

namespace {
thread_local BufferPool* current_pool = nullptr;
constexpr size_t kMaxHeldBuffers = 1024;
}  // namespace

// Buffers are sized to classes an eighth of a power of two apart (at most 12.5 % slack), so
// tensors of nearby sizes (OCR lines of different widths) share them.
size_t BufferPool::size_class(size_t n) {
  if (n <= 4096) return (n + 63) / 64 * 64;
  const int log2 = 63 - __builtin_clzll(n);
  const size_t step = size_t{1} << (log2 - 3);
  return (n + step - 1) / step * step;
}

std::shared_ptr<Bytes> BufferPool::take(size_t n, bool zero) {
  const size_t cls = size_class(n);
  std::unique_ptr<Bytes> v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = free_.size(); i-- > 0;) {  // the most recently returned first
      if (free_[i]->capacity() == cls) {
        v = std::move(free_[i]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        held_ -= static_cast<int64_t>(cls);
        break;
      }
    }
    out_ += static_cast<int64_t>(cls);
    peak_ = std::max(peak_, out_);
  }
  if (!v) {
    v = std::make_unique<Bytes>();
    v->reserve(cls);
  }
  v->resize(n);  // new bytes are left as they are
  if (zero && n) std::memset(v->data(), 0, n);
  std::weak_ptr<BufferPool> self = weak_from_this();
  return std::shared_ptr<Bytes>(v.release(), [self](Bytes* b) {
    if (auto pool = self.lock()) {
      pool->give(b);
    } else {
      delete b;
    }
  });
}

void BufferPool::give(Bytes* v) {
  std::unique_ptr<Bytes> owned(v);
  const int64_t bytes = static_cast<int64_t>(v->capacity());
  std::vector<std::unique_ptr<Bytes>> dropped;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  out_ -= bytes;
  const int64_t cap = kPeaksHeld * peak_;
  if (bytes == 0 || bytes > cap) return;
  while (!free_.empty() && (held_ + bytes > cap || free_.size() >= kMaxHeldBuffers)) {
    held_ -= static_cast<int64_t>(free_.front()->capacity());
    dropped.push_back(std::move(free_.front()));
    free_.erase(free_.begin());
  }
  held_ += bytes;
  free_.push_back(std::move(owned));
}

int64_t BufferPool::cap() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kPeaksHeld * peak_;
}

int64_t BufferPool::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

BufferScope::BufferScope(BufferPool* pool) : prev_(current_pool) {
  current_pool = pool;
}
BufferScope::~BufferScope() {
  current_pool = prev_;
}

namespace {

Result<Tensor> new_tensor(DType t, Shape shape, bool zero) {
  int64_t n = shape_numel(shape);
  if (n < 0)
    return make_error(StatusCode::kInvalidArgument, "invalid tensor shape {}", shape_str(shape));
  constexpr int64_t kCap = int64_t{4} << 30;
  if (n > kCap / static_cast<int64_t>(dtype_size(t))) {
    return make_error(StatusCode::kResourceExhausted, "tensor of shape {} exceeds the 4 GiB cap",
                      shape_str(shape));
  }
  Tensor out;
  out.dtype = t;
  out.shape = std::move(shape);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(t);
  out.buf = current_pool ? current_pool->take(bytes, zero)
            : zero       ? std::make_shared<Bytes>(bytes, uint8_t{0})
                         : std::make_shared<Bytes>(bytes);
  return out;
}

}  // namespace

Result<Tensor> make_tensor(DType t, Shape shape) {
  return new_tensor(t, std::move(shape), true);
}

Result<Tensor> make_tensor_uninit(DType t, Shape shape) {
  return new_tensor(t, std::move(shape), false);
}

Tensor make_f32(Shape shape, const std::vector<float>& values) {
  Tensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.buf = std::make_shared<Bytes>(values.size() * 4);
  if (!values.empty()) std::memcpy(t.buf->data(), values.data(), values.size() * 4);
  return t;
}

Tensor make_i64(Shape shape, const std::vector<int64_t>& values) {
  Tensor t;
  t.dtype = DType::kI64;
  t.shape = std::move(shape);
  t.buf = std::make_shared<Bytes>(values.size() * 8);
  if (!values.empty()) std::memcpy(t.buf->data(), values.data(), values.size() * 8);
  return t;
}

Tensor scalar_f32(float v) {
  return make_f32({}, {v});
}
Tensor scalar_i64(int64_t v) {
  return make_i64({}, {v});
}

template <typename Out, typename F>
static void visit_values(const Tensor& t, std::vector<Out>& out, F conv) {
  int64_t n = t.numel();
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kF32:
        out[i] = conv(t.data<float>()[i]);
        break;
      case DType::kF64:
        out[i] = conv(t.data<double>()[i]);
        break;
      case DType::kI64:
        out[i] = conv(t.data<int64_t>()[i]);
        break;
      case DType::kI32:
        out[i] = conv(t.data<int32_t>()[i]);
        break;
      case DType::kI16:
        out[i] = conv(t.data<int16_t>()[i]);
        break;
      case DType::kU16:
        out[i] = conv(t.data<uint16_t>()[i]);
        break;
      case DType::kI8:
        out[i] = conv(t.data<int8_t>()[i]);
        break;
      case DType::kU8:
        out[i] = conv(t.data<uint8_t>()[i]);
        break;
      case DType::kBool:
        out[i] = conv(t.data<uint8_t>()[i] != 0);
        break;
    }
  }
}

Result<std::vector<int64_t>> to_i64_vector(const Tensor& t) {
  if (t.dtype == DType::kF32 || t.dtype == DType::kF64) {
    return make_error(StatusCode::kInvalidArgument, "expected an integer tensor, got {}",
                      dtype_name(t.dtype));
  }
  std::vector<int64_t> out;
  if (!t.buf || t.numel() < 0) return out;
  visit_values(t, out, [](auto v) { return static_cast<int64_t>(v); });
  return out;
}

Result<std::vector<double>> to_f64_vector(const Tensor& t) {
  std::vector<double> out;
  if (!t.buf || t.numel() < 0) return out;
  visit_values(t, out, [](auto v) { return static_cast<double>(v); });
  return out;
}

}  // namespace power::onnx
