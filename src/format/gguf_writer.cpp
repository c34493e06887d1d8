// The GGUF writer: validates everything up front, then streams the file through a Sink (a
// growing vector for serialize(), a buffered temporary file for write()).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/checked.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace power {

static_assert(std::endian::native == std::endian::little,
              "GGUF writer assumes a little-endian host");

namespace {

bool alignment_valid(uint32_t a) {
  return a != 0 && std::has_single_bit(a);
}

Status check_name(std::string_view name, std::string_view what) {
  if (name.empty()) return make_error(StatusCode::kInvalidArgument, "{} is empty", what);
  if (name.size() > GgufLimits{}.max_name_bytes) {
    return make_error(StatusCode::kInvalidArgument, "{} is {} bytes long, more than {}", what,
                      name.size(), GgufLimits{}.max_name_bytes);
  }
  if (!gguf_internal::utf8_valid(name)) {
    return make_error(StatusCode::kInvalidArgument, "{} is not valid UTF-8", what);
  }
  return Status();
}

// Checks that a value can be written as its declared type without loss or ambiguity.
Status check_value(const GgufValue& v, uint32_t depth) {
  if (!gguf_value_type_valid(static_cast<uint32_t>(v.type))) {
    return make_error(StatusCode::kInvalidArgument, "invalid value type {}",
                      static_cast<uint32_t>(v.type));
  }
  const std::string_view tname = gguf_value_type_name(v.type);
  auto mismatch = [&] {
    return make_error(StatusCode::kInvalidArgument, "{} value holds the wrong C++ alternative",
                      tname);
  };
  switch (v.type) {
    case GgufValueType::kUint8:
    case GgufValueType::kUint16:
    case GgufValueType::kUint32:
    case GgufValueType::kUint64:
    case GgufValueType::kBool: {
      const auto* u = std::get_if<uint64_t>(&v.v);
      if (u == nullptr) return mismatch();
      const uint64_t bytes = gguf_internal::fixed_size(v.type);
      const uint64_t max = v.type == GgufValueType::kBool ? 1
                           : bytes == 8                   ? std::numeric_limits<uint64_t>::max()
                                                          : (uint64_t{1} << (8 * bytes)) - 1;
      if (*u > max) {
        return make_error(StatusCode::kInvalidArgument, "{} value {} is out of range", tname, *u);
      }
      return Status();
    }
    case GgufValueType::kInt8:
    case GgufValueType::kInt16:
    case GgufValueType::kInt32:
    case GgufValueType::kInt64: {
      const auto* i = std::get_if<int64_t>(&v.v);
      if (i == nullptr) return mismatch();
      const uint64_t bits = 8 * gguf_internal::fixed_size(v.type);
      if (bits < 64) {
        const int64_t hi = (int64_t{1} << (bits - 1)) - 1;
        if (*i > hi || *i < -hi - 1) {
          return make_error(StatusCode::kInvalidArgument, "{} value {} is out of range", tname, *i);
        }
      }
      return Status();
    }
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64: {
      const auto* d = std::get_if<double>(&v.v);
      if (d == nullptr) return mismatch();
      if (v.type == GgufValueType::kFloat32 && std::isfinite(*d) && std::fabs(*d) > FLT_MAX) {
        return make_error(StatusCode::kInvalidArgument, "f32 value {} is out of range", *d);
      }
      return Status();
    }
    case GgufValueType::kString:
      return std::holds_alternative<std::string>(v.v) ? Status() : mismatch();
    case GgufValueType::kArray: {
      const auto* items = std::get_if<std::vector<GgufValue>>(&v.v);
      if (items == nullptr) return mismatch();
      if (depth > GgufLimits{}.max_array_depth) {
        return make_error(StatusCode::kInvalidArgument, "arrays nested deeper than {}",
                          GgufLimits{}.max_array_depth);
      }
      if (!gguf_value_type_valid(static_cast<uint32_t>(v.array_type))) {
        return make_error(StatusCode::kInvalidArgument, "invalid array element type {}",
                          static_cast<uint32_t>(v.array_type));
      }
      for (size_t k = 0; k < items->size(); ++k) {
        const GgufValue& item = (*items)[k];
        if (item.type != v.array_type) {
          return make_error(StatusCode::kInvalidArgument,
                            "array of {} has an element {} of type {}",
                            gguf_value_type_name(v.array_type), k, gguf_value_type_name(item.type));
        }
        POWER_RETURN_IF_ERROR(check_value(item, depth + 1));
      }
      return Status();
    }
  }
  return mismatch();
}

Status errno_error(std::string_view what, const std::string& path, int err) {
  const StatusCode code =
      err == ENOSPC || err == EDQUOT ? StatusCode::kResourceExhausted : StatusCode::kIo;
  return Status(code, fmt::format("{}: {}", what, std::strerror(err))).with("path", path);
}

}  // namespace

namespace gguf_internal {

// Where the bytes go. Tracks how many were written, for padding.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status put(const uint8_t* p, size_t n) = 0;
  uint64_t written() const { return written_; }

  template <typename T>
  Status put_scalar(T x) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &x, sizeof(T));
    return put(b, sizeof(T));
  }
  Status put_string(std::string_view s) {
    POWER_RETURN_IF_ERROR(put_scalar<uint64_t>(s.size()));
    return put(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  Status pad_to(uint64_t alignment) {
    static constexpr uint8_t kZeros[256] = {};
    uint64_t target = 0;
    if (!checked_align_up(written_, alignment, &target)) {
      return Status(StatusCode::kInvalidArgument, "file size overflows");
    }
    while (written_ < target) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(target - written_, sizeof(kZeros)));
      POWER_RETURN_IF_ERROR(put(kZeros, n));
    }
    return Status();
  }

 protected:
  uint64_t written_ = 0;
};

}  // namespace gguf_internal

namespace {

using gguf_internal::Sink;

class VectorSink : public Sink {
 public:
  Status put(const uint8_t* p, size_t n) override {
    out.insert(out.end(), p, p + n);
    written_ += n;
    return Status();
  }
  std::vector<uint8_t> out;
};

// Buffers small writes; passes large ones (tensor data) straight to the file.
class FdSink : public Sink {
 public:
  FdSink(int fd, const std::string& path) : fd_(fd), path_(path) { buf_.reserve(kBufBytes); }

  Status put(const uint8_t* p, size_t n) override {
    written_ += n;
    if (buf_.size() + n <= kBufBytes) {
      buf_.insert(buf_.end(), p, p + n);
      return Status();
    }
    POWER_RETURN_IF_ERROR(flush());
    if (n < kBufBytes) {
      buf_.insert(buf_.end(), p, p + n);
      return Status();
    }
    return write_all(p, n);
  }

  Status flush() {
    Status st = write_all(buf_.data(), buf_.size());
    buf_.clear();
    return st;
  }

 private:
  static constexpr size_t kBufBytes = size_t{1} << 20;

  Status write_all(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return errno_error("write failed", path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status();
  }

  int fd_;
  const std::string& path_;
  std::vector<uint8_t> buf_;
};

Status put_value(Sink& s, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kUint8:
    case GgufValueType::kBool:
      return s.put_scalar(static_cast<uint8_t>(std::get<uint64_t>(v.v)));
    case GgufValueType::kUint16:
      return s.put_scalar(static_cast<uint16_t>(std::get<uint64_t>(v.v)));
    case GgufValueType::kUint32:
      return s.put_scalar(static_cast<uint32_t>(std::get<uint64_t>(v.v)));
    case GgufValueType::kUint64:
      return s.put_scalar(std::get<uint64_t>(v.v));
    case GgufValueType::kInt8:
      return s.put_scalar(static_cast<int8_t>(std::get<int64_t>(v.v)));
    case GgufValueType::kInt16:
      return s.put_scalar(static_cast<int16_t>(std::get<int64_t>(v.v)));
    case GgufValueType::kInt32:
      return s.put_scalar(static_cast<int32_t>(std::get<int64_t>(v.v)));
    case GgufValueType::kInt64:
      return s.put_scalar(std::get<int64_t>(v.v));
    case GgufValueType::kFloat32:
      return s.put_scalar(static_cast<float>(std::get<double>(v.v)));
    case GgufValueType::kFloat64:
      return s.put_scalar(std::get<double>(v.v));
    case GgufValueType::kString:
      return s.put_string(std::get<std::string>(v.v));
    case GgufValueType::kArray: {
      const auto& items = std::get<std::vector<GgufValue>>(v.v);
      POWER_RETURN_IF_ERROR(s.put_scalar(static_cast<uint32_t>(v.array_type)));
      POWER_RETURN_IF_ERROR(s.put_scalar<uint64_t>(items.size()));
      for (const GgufValue& item : items) POWER_RETURN_IF_ERROR(put_value(s, item));
      return Status();
    }
  }
  return Status(StatusCode::kInternal, "unvalidated value type");
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {}

void GgufWriter::set(std::string key, GgufValue value) {
  auto it = kv_index_.find(key);
  if (it != kv_index_.end()) {
    kv_[it->second].value = std::move(value);
    return;
  }
  kv_index_.emplace(key, kv_.size());
  kv_.push_back({std::move(key), std::move(value)});
}

Status GgufWriter::check_new_tensor(const std::string& name, GgmlType type,
                                    const std::vector<uint64_t>& ne, uint64_t* n_bytes) const {
  POWER_RETURN_IF_ERROR(check_name(name, "tensor name"));
  if (tensor_index_.find(name) != tensor_index_.end()) {
    return Status(StatusCode::kInvalidArgument, "duplicate tensor name");
  }
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info) {
    return make_error(StatusCode::kInvalidArgument, "unknown ggml type id {}",
                      static_cast<uint32_t>(type));
  }
  if (ne.empty() || ne.size() > static_cast<size_t>(kGgufMaxDims)) {
    return make_error(StatusCode::kInvalidArgument, "tensor has {} dimensions, expected 1 to {}",
                      ne.size(), kGgufMaxDims);
  }
  uint64_t n = 0;
  if (!gguf_internal::shape_elements(ne, &n)) {
    return Status(StatusCode::kInvalidArgument, "tensor shape has more than INT64_MAX elements");
  }
  if (ne[0] % info->block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "row length {} is not a multiple of the {} block size {}", ne[0], info->name,
                      info->block_elems);
  }
  uint64_t row_bytes = 0;
  if (!ggml_row_bytes(type, ne[0], &row_bytes)) {
    return Status(StatusCode::kInvalidArgument, "tensor byte size overflows");
  }
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];  // cannot wrap: shape_elements
  if (!checked_mul(row_bytes, rows, n_bytes)) {
    return Status(StatusCode::kInvalidArgument, "tensor byte size overflows");
  }
  return Status();
}

Status GgufWriter::add_pending(PendingTensor t) {
  tensor_index_.emplace(t.name, tensors_.size());
  tensors_.push_back(std::move(t));
  return Status();
}

Status GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<uint64_t> ne,
                              std::vector<uint8_t> data) {
  PendingTensor t;
  Status st = check_new_tensor(name, type, ne, &t.n_bytes);
  if (st.ok() && data.size() != t.n_bytes) {
    st = make_error(StatusCode::kInvalidArgument, "tensor data has {} bytes, its shape needs {}",
                    data.size(), t.n_bytes);
  }
  if (!st.ok()) return std::move(st.with("tensor", name));
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  t.owned = std::move(data);
  t.is_owned = true;
  return add_pending(std::move(t));
}

Status GgufWriter::add_tensor_view(std::string name, GgmlType type, std::vector<uint64_t> ne,
                                   std::span<const uint8_t> data) {
  PendingTensor t;
  Status st = check_new_tensor(name, type, ne, &t.n_bytes);
  if (st.ok() && data.size() != t.n_bytes) {
    st = make_error(StatusCode::kInvalidArgument, "tensor data has {} bytes, its shape needs {}",
                    data.size(), t.n_bytes);
  }
  if (!st.ok()) return std::move(st.with("tensor", name));
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  t.view = data;
  return add_pending(std::move(t));
}

Status GgufWriter::add_tensor_deferred(std::string name, GgmlType type, std::vector<uint64_t> ne,
                                       TensorFill fill) {
  PendingTensor t;
  Status st = check_new_tensor(name, type, ne, &t.n_bytes);
  if (st.ok() && !fill) st = Status(StatusCode::kInvalidArgument, "tensor fill function is empty");
  if (st.ok() && t.n_bytes > std::numeric_limits<size_t>::max()) {
    st = Status(StatusCode::kInvalidArgument, "tensor is too large for memory");
  }
  if (!st.ok()) return std::move(st.with("tensor", name));
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  t.fill = std::move(fill);
  return add_pending(std::move(t));
}

Status GgufWriter::validate() const {
  if (!alignment_valid(alignment_)) {
    return make_error(StatusCode::kInvalidArgument, "alignment {} is not a nonzero power of two",
                      alignment_);
  }
  for (const GgufKeyValue& kv : kv_) {
    Status st = check_name(kv.key, "metadata key");
    if (st.ok()) st = check_value(kv.value, 1);
    if (st.ok() && kv.key == kGgufAlignmentKey &&
        !(kv.value.type == GgufValueType::kUint32 && kv.value.as_u64() == alignment_)) {
      st = make_error(StatusCode::kInvalidArgument,
                      "general.alignment must be the u32 {} the writer was made with", alignment_);
    }
    if (!st.ok()) return std::move(st.with("key", kv.key));
  }
  return Status();
}

Status GgufWriter::emit(Sink& sink) const {
  const bool auto_alignment =
      alignment_ != kGgufDefaultAlignment && kv_index_.find(kGgufAlignmentKey) == kv_index_.end();
  POWER_RETURN_IF_ERROR(sink.put_scalar(kGgufMagic));
  POWER_RETURN_IF_ERROR(sink.put_scalar<uint32_t>(3));
  POWER_RETURN_IF_ERROR(sink.put_scalar<uint64_t>(tensors_.size()));
  POWER_RETURN_IF_ERROR(sink.put_scalar<uint64_t>(kv_.size() + (auto_alignment ? 1 : 0)));
  for (const GgufKeyValue& kv : kv_) {
    POWER_RETURN_IF_ERROR(sink.put_string(kv.key));
    POWER_RETURN_IF_ERROR(sink.put_scalar(static_cast<uint32_t>(kv.value.type)));
    POWER_RETURN_IF_ERROR(put_value(sink, kv.value));
  }
  if (auto_alignment) {
    POWER_RETURN_IF_ERROR(sink.put_string(kGgufAlignmentKey));
    POWER_RETURN_IF_ERROR(sink.put_scalar(static_cast<uint32_t>(GgufValueType::kUint32)));
    POWER_RETURN_IF_ERROR(sink.put_scalar(alignment_));
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    POWER_RETURN_IF_ERROR(sink.put_string(t.name));
    POWER_RETURN_IF_ERROR(sink.put_scalar(static_cast<uint32_t>(t.ne.size())));
    for (uint64_t d : t.ne) POWER_RETURN_IF_ERROR(sink.put_scalar(d));
    POWER_RETURN_IF_ERROR(sink.put_scalar(static_cast<uint32_t>(t.type)));
    POWER_RETURN_IF_ERROR(sink.put_scalar(offset));
    if (!checked_add(offset, t.n_bytes, &offset) ||
        !checked_align_up(offset, alignment_, &offset)) {
      return Status(StatusCode::kInvalidArgument, "data section size overflows");
    }
  }
  POWER_RETURN_IF_ERROR(sink.pad_to(alignment_));
  std::vector<uint8_t> scratch;  // one deferred tensor at a time
  for (const PendingTensor& t : tensors_) {
    std::span<const uint8_t> data = t.is_owned ? std::span<const uint8_t>(t.owned) : t.view;
    if (t.fill) {
      scratch.assign(static_cast<size_t>(t.n_bytes), 0);
      Status st = t.fill(scratch);
      if (!st.ok()) return std::move(st.with("tensor", t.name));
      data = scratch;
    }
    POWER_RETURN_IF_ERROR(sink.put(data.data(), data.size()));
    POWER_RETURN_IF_ERROR(sink.pad_to(alignment_));
  }
  return Status();
}

Result<std::vector<uint8_t>> GgufWriter::serialize() const {
  POWER_RETURN_IF_ERROR(validate());
  VectorSink sink;
  POWER_RETURN_IF_ERROR(emit(sink));
  return std::move(sink.out);
}

Status GgufWriter::write(const std::string& path) const {
  POWER_RETURN_IF_ERROR(validate());
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const std::string tmp =
      fmt::format("{}.tmp-{}-{}-{:x}", path, ::getpid(), counter.fetch_add(1), rd());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return errno_error("cannot create temporary file", tmp, errno);
  Status st;
  {
    FdSink sink(fd.get(), tmp);
    st = emit(sink);
    if (st.ok()) st = sink.flush();
  }
  if (st.ok() && ::fsync(fd.get()) != 0) st = errno_error("fsync failed", tmp, errno);
  if (st.ok() && ::close(fd.release()) != 0) st = errno_error("close failed", tmp, errno);
  fd.reset();
  if (st.ok()) st = rename_durable(tmp, path);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

}  // namespace power
