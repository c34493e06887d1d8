// The GGUF reader: parses a file as hostile input (see the contract in gguf.h).
//
// Every read goes through need(), which checks the remaining bytes before touching them; every
// count is checked against what the remaining bytes could possibly hold before anything is
// reserved, and every allocation is charged to GgufLimits::max_metadata_bytes first.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include <fmt/ranges.h>

#include "base/checked.h"
#include "base/huge_pages.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"
#include "secure/container.h"

namespace power {

static_assert(std::endian::native == std::endian::little,
              "GGUF reader assumes a little-endian host");

namespace {

// Fewest bytes a key-value pair can take: u64 key length, a 1-byte key, u32 type, a u8 value.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// Fewest bytes a tensor info can take: name length, a 1-byte name, n_dims, one dim, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
// What one map entry costs beyond its key, for the metadata budget.
constexpr uint64_t kIndexEntryBytes = 64;

template <typename... Args>
Status corrupt_at(uint64_t offset, fmt::format_string<Args...> f, Args&&... args) {
  return make_error(StatusCode::kCorrupt, f, std::forward<Args>(args)...).with("offset", offset);
}

}  // namespace

// Parses bytes into a GgufFile. Not in an anonymous namespace: GgufFile befriends it.
class GgufParser {
 public:
  GgufParser(GgufFile& file, const GgufLimits& limits) : f_(file), b_(file.bytes_), lim_(limits) {
    lim_.max_array_depth = std::min(lim_.max_array_depth, gguf_internal::kMaxArrayDepthCap);
  }

  Status run() {
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    POWER_RETURN_IF_ERROR(read_header(&n_tensors, &n_kv));
    std::vector<uint64_t> value_offsets;  // where each kv's value starts, for later errors
    value_offsets.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) POWER_RETURN_IF_ERROR(read_kv(&value_offsets));
    POWER_RETURN_IF_ERROR(read_alignment(value_offsets));
    std::vector<uint64_t> offset_field_at;  // where each tensor's offset field is
    offset_field_at.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i)
      POWER_RETURN_IF_ERROR(read_tensor_info(&offset_field_at));
    return layout_data(offset_field_at);
  }

 private:
  uint64_t remaining() const { return b_.size() - pos_; }

  Status need(uint64_t n, std::string_view what) const {
    if (remaining() < n) {
      return corrupt_at(pos_, "truncated: {} needs {} bytes, {} left in the file", what, n,
                        remaining());
    }
    return Status();
  }

  template <typename T>
  Status read(T* out, std::string_view what) {
    POWER_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status();
  }

  Status charge(uint64_t bytes, uint64_t at, std::string_view what) {
    uint64_t total = 0;
    if (!checked_add(used_, bytes, &total) || total > lim_.max_metadata_bytes) {
      return make_error(StatusCode::kResourceExhausted,
                        "{} would take the parsed metadata past its limit of {} bytes", what,
                        lim_.max_metadata_bytes)
          .with("offset", at);
    }
    used_ = total;
    return Status();
  }

  // A gguf string: u64 length + bytes. `max_len` caps the length before the bytes are read.
  Status read_string(std::string* out, std::string_view what, uint64_t max_len) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    POWER_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining()) {
      return corrupt_at(at, "{} of {} bytes runs past the end of the file ({} bytes left)", what,
                        len, remaining());
    }
    if (len > max_len) {
      return corrupt_at(at, "{} is {} bytes long, more than the limit of {}", what, len, max_len);
    }
    POWER_RETURN_IF_ERROR(charge(len, at, what));
    out->assign(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status();
  }

  // A key or a tensor name: non-empty, bounded, valid UTF-8.
  Status read_name(std::string* out, std::string_view what) {
    const uint64_t at = pos_;
    POWER_RETURN_IF_ERROR(read_string(out, what, lim_.max_name_bytes));
    if (out->empty()) return corrupt_at(at, "{} is empty", what);
    if (!gguf_internal::utf8_valid(*out)) return corrupt_at(at, "{} is not valid UTF-8", what);
    return Status();
  }

  Status read_header(uint64_t* n_tensors, uint64_t* n_kv) {
    if (b_.size() < 4) {
      return corrupt_at(0, "not a GGUF file: {} bytes, too short for the magic", b_.size());
    }
    uint32_t magic = 0;
    POWER_RETURN_IF_ERROR(read(&magic, "magic"));
    if (magic != kGgufMagic) {
      return corrupt_at(0, "not a GGUF file: magic is {:02x} {:02x} {:02x} {:02x}, expected 'GGUF'",
                        b_[0], b_[1], b_[2], b_[3]);
    }
    uint32_t version = 0;
    POWER_RETURN_IF_ERROR(read(&version, "version"));
    if (version != 2 && version != 3) {
      const uint32_t swapped = __builtin_bswap32(version);
      if (swapped >= 1 && swapped <= 3) {
        return make_error(StatusCode::kUnsupported, "big-endian GGUF (version {}) is not supported",
                          swapped)
            .with("offset", 4);
      }
      if (version == 1) {
        return make_error(StatusCode::kUnsupported,
                          "GGUF version 1 is not supported (only versions 2 and 3); re-convert "
                          "the model with a current llama.cpp")
            .with("offset", 4);
      }
      return make_error(StatusCode::kUnsupported,
                        "GGUF version {} is not supported (only versions 2 and 3)", version)
          .with("offset", 4);
    }
    f_.version_ = version;
    const uint64_t counts_at = pos_;
    POWER_RETURN_IF_ERROR(read(n_tensors, "tensor count"));
    POWER_RETURN_IF_ERROR(read(n_kv, "metadata key-value count"));
    // Cheap upper bounds first: each entry takes a minimum number of bytes in the file.
    if (*n_kv > remaining() / kMinKvBytes) {
      return corrupt_at(counts_at + 8,
                        "metadata count {} is impossible: the {} bytes left hold at most {}", *n_kv,
                        remaining(), remaining() / kMinKvBytes);
    }
    if (*n_tensors > remaining() / kMinTensorInfoBytes) {
      return corrupt_at(counts_at,
                        "tensor count {} is impossible: the {} bytes left hold at most {}",
                        *n_tensors, remaining(), remaining() / kMinTensorInfoBytes);
    }
    if (*n_kv * kMinKvBytes + *n_tensors * kMinTensorInfoBytes > remaining()) {
      return corrupt_at(counts_at, "{} tensors and {} metadata entries cannot fit in {} bytes",
                        *n_tensors, *n_kv, remaining());
    }
    POWER_RETURN_IF_ERROR(
        charge(*n_kv * (sizeof(GgufKeyValue) + kIndexEntryBytes + 8), counts_at, "metadata"));
    POWER_RETURN_IF_ERROR(charge(*n_tensors * (sizeof(GgufTensor) + kIndexEntryBytes + 8),
                                 counts_at, "tensor infos"));
    f_.kv_.reserve(*n_kv);
    f_.tensors_.reserve(*n_tensors);
    return Status();
  }

  Status read_kv(std::vector<uint64_t>* value_offsets) {
    const uint64_t at = pos_;
    GgufKeyValue kv;
    POWER_RETURN_IF_ERROR(read_name(&kv.key, "metadata key"));
    if (f_.kv_index_.find(kv.key) != f_.kv_index_.end()) {
      return corrupt_at(at, "duplicate metadata key").with("key", kv.key);
    }
    POWER_RETURN_IF_ERROR(charge(kv.key.size(), at, "metadata key"));  // the index's copy
    const uint64_t type_at = pos_;
    uint32_t type_id = 0;
    Status st = read(&type_id, "metadata value type");
    if (st.ok() && !gguf_value_type_valid(type_id)) {
      st = corrupt_at(type_at, "invalid metadata value type {}", type_id);
    }
    if (st.ok()) {
      value_offsets->push_back(pos_);
      st = read_value(static_cast<GgufValueType>(type_id), 1, &kv.value);
    }
    if (!st.ok()) return std::move(st.with("key", kv.key));
    f_.kv_index_.emplace(kv.key, f_.kv_.size());
    f_.kv_.push_back(std::move(kv));
    return Status();
  }

  // `depth` is the array nesting level this value would sit at if it is an array (1 at top).
  Status read_value(GgufValueType type, uint32_t depth, GgufValue* out) {
    out->type = type;
    const uint64_t at = pos_;
    switch (type) {
      case GgufValueType::kUint8:
        return read_unsigned<uint8_t>(out);
      case GgufValueType::kUint16:
        return read_unsigned<uint16_t>(out);
      case GgufValueType::kUint32:
        return read_unsigned<uint32_t>(out);
      case GgufValueType::kUint64:
        return read_unsigned<uint64_t>(out);
      case GgufValueType::kInt8:
        return read_signed<int8_t>(out);
      case GgufValueType::kInt16:
        return read_signed<int16_t>(out);
      case GgufValueType::kInt32:
        return read_signed<int32_t>(out);
      case GgufValueType::kInt64:
        return read_signed<int64_t>(out);
      case GgufValueType::kFloat32: {
        float x = 0;
        POWER_RETURN_IF_ERROR(read(&x, "f32 value"));
        out->v = double{x};
        return Status();
      }
      case GgufValueType::kFloat64: {
        double x = 0;
        POWER_RETURN_IF_ERROR(read(&x, "f64 value"));
        out->v = x;
        return Status();
      }
      case GgufValueType::kBool: {
        uint8_t x = 0;
        POWER_RETURN_IF_ERROR(read(&x, "bool value"));
        if (x > 1) return corrupt_at(at, "bool value is {}, expected 0 or 1", x);
        out->v = uint64_t{x};
        return Status();
      }
      case GgufValueType::kString: {
        std::string s;
        POWER_RETURN_IF_ERROR(read_string(&s, "string value", UINT64_MAX));
        out->v = std::move(s);
        return Status();
      }
      case GgufValueType::kArray:
        return read_array(depth, out);
    }
    return corrupt_at(at, "invalid metadata value type {}", static_cast<uint32_t>(type));
  }

  template <typename T>
  Status read_unsigned(GgufValue* out) {
    T x = 0;
    POWER_RETURN_IF_ERROR(read(&x, gguf_value_type_name(out->type)));
    out->v = uint64_t{x};
    return Status();
  }

  template <typename T>
  Status read_signed(GgufValue* out) {
    T x = 0;
    POWER_RETURN_IF_ERROR(read(&x, gguf_value_type_name(out->type)));
    out->v = int64_t{x};
    return Status();
  }

  Status read_array(uint32_t depth, GgufValue* out) {
    const uint64_t at = pos_;
    if (depth > lim_.max_array_depth) {
      return corrupt_at(at, "arrays nested deeper than the limit of {}", lim_.max_array_depth);
    }
    uint32_t elem_id = 0;
    POWER_RETURN_IF_ERROR(read(&elem_id, "array element type"));
    if (!gguf_value_type_valid(elem_id)) {
      return corrupt_at(at, "invalid array element type {}", elem_id);
    }
    const auto elem = static_cast<GgufValueType>(elem_id);
    uint64_t count = 0;
    POWER_RETURN_IF_ERROR(read(&count, "array count"));
    const uint64_t min_size = gguf_internal::min_encoded_size(elem);
    if (count > remaining() / min_size) {
      return corrupt_at(at + 4,
                        "array of {} {} elements cannot fit in the {} bytes left in the file",
                        count, gguf_value_type_name(elem), remaining());
    }
    POWER_RETURN_IF_ERROR(charge(count * sizeof(GgufValue), at, "array"));
    out->array_type = elem;
    std::vector<GgufValue> items(static_cast<size_t>(count));
    for (GgufValue& item : items) POWER_RETURN_IF_ERROR(read_value(elem, depth + 1, &item));
    out->v = std::move(items);
    return Status();
  }

  Status read_alignment(const std::vector<uint64_t>& value_offsets) {
    auto it = f_.kv_index_.find(kGgufAlignmentKey);
    if (it == f_.kv_index_.end()) return Status();
    const GgufValue& v = f_.kv_[it->second].value;
    const uint64_t at = value_offsets[it->second];
    if (v.type != GgufValueType::kUint32) {
      return corrupt_at(at, "alignment must be a u32, not {}", gguf_value_type_name(v.type))
          .with("key", kGgufAlignmentKey);
    }
    const uint64_t a = std::get<uint64_t>(v.v);
    if (a == 0 || !std::has_single_bit(a)) {
      return corrupt_at(at, "alignment {} is not a nonzero power of two", a)
          .with("key", kGgufAlignmentKey);
    }
    f_.alignment_ = static_cast<uint32_t>(a);
    return Status();
  }

  Status read_tensor_info(std::vector<uint64_t>* offset_field_at) {
    const uint64_t at = pos_;
    GgufTensor t;
    POWER_RETURN_IF_ERROR(read_name(&t.name, "tensor name"));
    if (f_.tensor_index_.find(t.name) != f_.tensor_index_.end()) {
      return corrupt_at(at, "duplicate tensor name").with("tensor", t.name);
    }
    POWER_RETURN_IF_ERROR(charge(t.name.size(), at, "tensor name"));  // the index's copy
    Status st = read_tensor_fields(&t, offset_field_at);
    if (!st.ok()) return std::move(st.with("tensor", t.name));
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
    return Status();
  }

  Status read_tensor_fields(GgufTensor* t, std::vector<uint64_t>* offset_field_at) {
    const uint64_t dims_at = pos_;
    uint32_t n_dims = 0;
    POWER_RETURN_IF_ERROR(read(&n_dims, "tensor dimension count"));
    if (n_dims == 0 || n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
      return corrupt_at(dims_at, "tensor has {} dimensions, expected 1 to {}", n_dims,
                        kGgufMaxDims);
    }
    const uint64_t ne_at = pos_;
    t->ne.resize(n_dims);
    for (uint32_t i = 0; i < n_dims; ++i) {
      POWER_RETURN_IF_ERROR(read(&t->ne[i], "tensor dimension"));
    }
    uint64_t n_elements = 0;
    if (!gguf_internal::shape_elements(t->ne, &n_elements)) {
      return corrupt_at(ne_at, "tensor shape [{}] has more than INT64_MAX elements",
                        fmt::join(t->ne, ", "));
    }
    const uint64_t type_at = pos_;
    uint32_t type_id = 0;
    POWER_RETURN_IF_ERROR(read(&type_id, "tensor type"));
    const auto info = ggml_type_info(type_id);
    if (!info) {
      return make_error(StatusCode::kUnsupported, "tensor has unknown ggml type id {}", type_id)
          .with("offset", type_at);
    }
    t->type = info->type;
    if (t->ne[0] % info->block_elems != 0) {
      return corrupt_at(ne_at, "row length {} is not a multiple of the {} block size {}", t->ne[0],
                        info->name, info->block_elems);
    }
    uint64_t row_bytes = 0;
    if (!ggml_row_bytes(t->type, t->ne[0], &row_bytes)) {
      return corrupt_at(ne_at, "tensor byte size overflows (a row of {} {} elements)", t->ne[0],
                        info->name);
    }
    uint64_t rows = 1;
    for (uint32_t i = 1; i < n_dims; ++i) rows *= t->ne[i];  // cannot wrap: shape_elements
    if (!checked_mul(row_bytes, rows, &t->n_bytes)) {
      return corrupt_at(ne_at, "tensor byte size overflows ({} rows of {} bytes)", rows, row_bytes);
    }
    const uint64_t off_at = pos_;
    POWER_RETURN_IF_ERROR(read(&t->offset, "tensor data offset"));
    if (t->offset % f_.alignment_ != 0) {
      return corrupt_at(off_at, "tensor data offset {} is not a multiple of the alignment {}",
                        t->offset, f_.alignment_);
    }
    offset_field_at->push_back(off_at);
    return Status();
  }

  Status layout_data(const std::vector<uint64_t>& offset_field_at) {
    // The data section starts at the next multiple of the alignment; a file without tensor
    // data may end before it (llama.cpp writes vocab-only files without the padding).
    if (!checked_align_up(pos_, f_.alignment_, &f_.data_offset_)) {
      return corrupt_at(pos_, "data section offset overflows");
    }
    const uint64_t size = b_.size();
    for (size_t i = 0; i < f_.tensors_.size(); ++i) {
      GgufTensor& t = f_.tensors_[i];
      uint64_t end = 0;
      if (!checked_add(f_.data_offset_, t.offset, &t.file_offset) ||
          !checked_add(t.file_offset, t.n_bytes, &end) || end > size) {
        return corrupt_at(offset_field_at[i],
                          "tensor data (offset {} + {} bytes after the data section at {}) runs "
                          "past the end of the file ({} bytes)",
                          t.offset, t.n_bytes, f_.data_offset_, size)
            .with("tensor", t.name);
      }
      t.data = b_.data() + t.file_offset;
    }
    // No two tensors may share bytes (empty tensors share nothing).
    std::vector<size_t> order;
    order.reserve(f_.tensors_.size());
    for (size_t i = 0; i < f_.tensors_.size(); ++i) {
      if (f_.tensors_[i].n_bytes > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensor& prev = f_.tensors_[order[k - 1]];
      const GgufTensor& cur = f_.tensors_[order[k]];
      if (cur.offset < prev.offset + prev.n_bytes) {
        return corrupt_at(offset_field_at[order[k]],
                          "tensor data [{}, {}) overlaps tensor '{}' at [{}, {})", cur.offset,
                          cur.offset + cur.n_bytes, prev.name, prev.offset,
                          prev.offset + prev.n_bytes)
            .with("tensor", cur.name);
      }
    }
    return Status();
  }

  GgufFile& f_;
  std::span<const uint8_t> b_;
  GgufLimits lim_;
  uint64_t pos_ = 0;
  uint64_t used_ = 0;  // bytes charged to lim_.max_metadata_bytes
};

Result<std::unique_ptr<GgufFile>> GgufFile::parse(std::span<const uint8_t> bytes,
                                                  const GgufLimits& limits) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = bytes;
  GgufParser parser(*f, limits);
  POWER_RETURN_IF_ERROR(parser.run());
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path,
                                                 const GgufLimits& limits) {
  auto mapping = MappedFile::open(path);
  if (!mapping.ok()) return std::move(mapping).take_status();
  // Said here, where every command that opens a model passes, rather than as "bad magic".
  if (secure::is_container(mapping->bytes())) {
    return Status(StatusCode::kInvalidArgument,
                  "this is an encrypted Power container (power encrypt); it opens only where a "
                  "model key is taken (power run/serve --model-key-file, POWER_MODEL_KEY)")
        .with("path", path);
  }
  return open(std::move(mapping).value(), limits);
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(MappedFile mapping, const GgufLimits& limits) {
  const std::string path = mapping.path();
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->mapping_ = std::move(mapping);
  f->bytes_ = f->mapping_.bytes();
  // Weights read through the mapping (the types the kernels do not repack) stream once per
  // token: 2 MiB folios where the filesystem makes them (POWER_HUGEPAGES=0: not advised).
  if (huge_pages_enabled()) f->mapping_.advise(0, f->mapping_.size(), AccessHint::kHugePage);
  GgufParser parser(*f, limits);
  Status st = parser.run();
  if (!st.ok()) return std::move(st.with("path", path));
  return f;
}

}  // namespace power
