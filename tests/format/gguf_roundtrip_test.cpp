// GgufWriter -> GgufFile round trips: every value type, alignments, tensor kinds, durable
// writes, and the writer's own validation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "format/gguf.h"
#include "gguf_test_util.h"
#include "test_util.h"

namespace power {
namespace {

using V = GgufValue;
using VT = GgufValueType;

std::unique_ptr<GgufFile> Reparse(const GgufWriter& w, std::vector<uint8_t>* storage) {
  auto bytes = w.serialize();
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  if (!bytes.ok()) return nullptr;
  *storage = std::move(bytes).value();
  auto f = GgufFile::parse(*storage);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return nullptr;
  return std::move(f).value();
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<GgufKeyValue> EveryValueType() {
  std::vector<GgufKeyValue> kv = {
      {"t.u8", V::u8(255)},
      {"t.i8", V::i8(-128)},
      {"t.u16", V::u16(65535)},
      {"t.i16", V::i16(-32768)},
      {"t.u32", V::u32(4294967295u)},
      {"t.i32", V::i32(std::numeric_limits<int32_t>::min())},
      {"t.u64", V::u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", V::i64(std::numeric_limits<int64_t>::min())},
      {"t.f32", V::f32(1e-5f)},
      {"t.f32_inf", V::f32(-std::numeric_limits<float>::infinity())},
      {"t.f32_denormal", V::f32(std::numeric_limits<float>::denorm_min())},
      {"t.f64", V::f64(3.141592653589793)},
      {"t.f64_tiny", V::f64(std::numeric_limits<double>::denorm_min())},
      {"t.true", V::boolean(true)},
      {"t.false", V::boolean(false)},
      {"t.str", V::str("hello, wörld ☃")},
      {"t.str_empty", V::str("")},
      {"t.str_nul", V::str(std::string("a\0b", 3))},
      {"t.str_not_utf8", V::str("\xff\xfe byte piece \xc0")},  // values are raw bytes
      {"t.arr_empty_u8", V::array(VT::kUint8, {})},
      {"t.arr_i32", V::array(VT::kInt32, {V::i32(-1), V::i32(0), V::i32(7)})},
      {"t.arr_f32", V::array(VT::kFloat32, {V::f32(0.5f), V::f32(-2.0f)})},
      {"t.arr_f64", V::array(VT::kFloat64, {V::f64(1e300)})},
      {"t.arr_bool", V::array(VT::kBool, {V::boolean(true), V::boolean(false)})},
      {"t.arr_u64", V::array(VT::kUint64, {V::u64(1), V::u64(uint64_t{1} << 63)})},
      {"t.arr_str", V::string_array({"a", "", "ccc", std::string(300, 'x')})},
      {"t.arr_str_empty", V::string_array({})},
      {"t.arr_nested",
       V::array(VT::kArray, {V::array(VT::kUint16, {V::u16(1), V::u16(2)}),
                             V::array(VT::kUint16, {}), V::array(VT::kString, {V::str("deep")})})},
      {"t.arr_of_empty_arrays",
       V::array(VT::kArray, {V::array(VT::kInt8, {}), V::array(VT::kInt8, {})})},
  };
  // Eight levels: the deepest the reader accepts by default.
  V deep = V::array(VT::kInt64, {V::i64(42)});
  for (int i = 1; i < 8; ++i) deep = V::array(VT::kArray, {deep});
  kv.push_back({"t.arr_depth8", deep});
  return kv;
}

TEST(GgufRoundTrip, EveryValueType) {
  GgufWriter w;
  const auto kv = EveryValueType();
  for (const auto& e : kv) w.set(e.key, e.value);
  std::vector<uint8_t> storage;
  auto f = Reparse(w, &storage);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_TRUE(f->tensors().empty());
  ASSERT_EQ(f->metadata().size(), kv.size());  // no general.alignment at the default
  for (size_t i = 0; i < kv.size(); ++i) {
    EXPECT_EQ(f->metadata()[i].key, kv[i].key);
    EXPECT_TRUE(f->metadata()[i].value == kv[i].value) << kv[i].key;
  }
}

TEST(GgufRoundTrip, NanSurvives) {
  GgufWriter w;
  w.set("nan32", V::f32(std::numeric_limits<float>::quiet_NaN()));
  w.set("nan64", V::f64(-std::numeric_limits<double>::quiet_NaN()));
  std::vector<uint8_t> storage;
  auto f = Reparse(w, &storage);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(std::isnan(f->get_f64("nan32").value()));
  EXPECT_TRUE(std::isnan(f->get_f64("nan64").value()));
  EXPECT_TRUE(std::signbit(f->get_f64("nan64").value()));
}

TEST(GgufRoundTrip, TypedGetters) {
  GgufWriter w;
  for (const auto& e : EveryValueType()) w.set(e.key, e.value);
  w.set("t.i32_pos", V::i32(12));
  std::vector<uint8_t> storage;
  auto f = Reparse(w, &storage);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->get_u64("t.u8").value(), 255u);
  EXPECT_EQ(f->get_u64("t.i32_pos").value(), 12u);
  EXPECT_EQ(f->get_u64("t.u64").value(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f->get_i64("t.i8").value(), -128);
  EXPECT_EQ(f->get_i64("t.u32").value(), 4294967295);
  EXPECT_EQ(f->get_f64("t.f32").value(), static_cast<double>(1e-5f));
  EXPECT_EQ(f->get_f64("t.u16").value(), 65535.0);
  EXPECT_EQ(f->get_bool("t.true").value(), true);
  EXPECT_EQ(f->get_bool("t.false").value(), false);
  EXPECT_EQ(f->get_string("t.str").value(), "hello, wörld ☃");
  EXPECT_EQ(f->get_string("t.str_empty").value(), "");
  EXPECT_EQ(f->get_string_array("t.arr_str").value(),
            (std::vector<std::string>{"a", "", "ccc", std::string(300, 'x')}));
  EXPECT_TRUE(f->get_string_array("t.arr_str_empty").value().empty());

  // Absent keys and wrong types name the key.
  EXPECT_EQ(f->get_u64("nope").status().code(), StatusCode::kNotFound);
  EXPECT_NE(f->get_u64("nope").status().to_string().find("key=nope"), std::string::npos);
  EXPECT_EQ(f->get_u64("t.i8").status().code(), StatusCode::kInvalidArgument);   // negative
  EXPECT_EQ(f->get_i64("t.u64").status().code(), StatusCode::kInvalidArgument);  // too big
  EXPECT_EQ(f->get_u64("t.f32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->get_u64("t.true").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->get_bool("t.u8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->get_f64("t.str").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->get_string("t.u8").status().code(), StatusCode::kInvalidArgument);
  auto wrong = f->get_string_array("t.arr_i32");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().to_string().find("array of i32"), std::string::npos)
      << wrong.status().to_string();
  EXPECT_EQ(f->find("t.u8")->type, VT::kUint8);
  EXPECT_EQ(f->find("absent"), nullptr);
}

TEST(GgufRoundTrip, SetReplacesInPlace) {
  GgufWriter w;
  w.set("a", V::u32(1));
  w.set("b", V::u32(2));
  w.set("a", V::str("again"));
  std::vector<uint8_t> storage;
  auto f = Reparse(w, &storage);
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].key, "a");
  EXPECT_EQ(f->get_string("a").value(), "again");
}

struct TensorCase {
  const char* name;
  GgmlType type;
  std::vector<uint64_t> ne;
};

const std::vector<TensorCase>& Tensors() {
  static const std::vector<TensorCase> cases = {
      {"f32", GgmlType::F32, {3, 2}},
      {"f16", GgmlType::F16, {5}},
      {"q4_0", GgmlType::Q4_0, {64, 2}},
      {"q8_0", GgmlType::Q8_0, {32, 1, 3}},
      {"q4_k", GgmlType::Q4_K, {256, 2, 1, 2}},
      {"iq2_xxs", GgmlType::IQ2_XXS, {256}},
      {"i32", GgmlType::I32, {7}},
      {"empty", GgmlType::F32, {0, 4}},
      {"bf16", GgmlType::BF16, {1, 1, 1, 1}},
      {"tq2_0", GgmlType::TQ2_0, {512}},
  };
  return cases;
}

uint64_t BytesOf(const TensorCase& c) {
  uint64_t row = 0;
  EXPECT_TRUE(ggml_row_bytes(c.type, c.ne[0], &row));
  uint64_t rows = 1;
  for (size_t i = 1; i < c.ne.size(); ++i) rows *= c.ne[i];
  return row * rows;
}

void CheckTensors(const GgufFile& f) {
  ASSERT_EQ(f.tensors().size(), Tensors().size());
  for (size_t i = 0; i < Tensors().size(); ++i) {
    const TensorCase& c = Tensors()[i];
    const GgufTensor* t = f.find_tensor(c.name);
    ASSERT_NE(t, nullptr) << c.name;
    EXPECT_EQ(t, &f.tensors()[i]);
    EXPECT_EQ(t->type, c.type);
    EXPECT_EQ(t->ne, c.ne);
    EXPECT_EQ(t->n_bytes, BytesOf(c));
    EXPECT_EQ(t->offset % f.alignment(), 0u) << c.name;
    EXPECT_EQ(t->file_offset, f.data_offset() + t->offset);
    EXPECT_EQ(t->data, f.bytes().data() + t->file_offset);
    const auto want = Pattern(t->n_bytes, static_cast<uint8_t>(i));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), t->bytes().begin(), t->bytes().end()))
        << c.name;
  }
  EXPECT_EQ(f.find_tensor("empty")->n_elements(), 0u);
  EXPECT_EQ(f.find_tensor("q4_k")->n_elements(), 1024u);
  EXPECT_EQ(f.find_tensor("q4_k")->rows(), 4u);
  EXPECT_EQ(f.find_tensor("absent"), nullptr);
}

class GgufAlignment : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufAlignment, TensorsOfSeveralTypes) {
  const uint32_t alignment = GetParam();
  GgufWriter w(alignment);
  w.set("general.architecture", V::str("test"));
  for (size_t i = 0; i < Tensors().size(); ++i) {
    const TensorCase& c = Tensors()[i];
    ASSERT_TRUE(w.add_tensor(c.name, c.type, c.ne, Pattern(BytesOf(c), i)).ok()) << c.name;
  }
  std::vector<uint8_t> storage;
  auto f = Reparse(w, &storage);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->data_offset() % alignment, 0u);
  if (alignment == kGgufDefaultAlignment) {
    EXPECT_EQ(f->find("general.alignment"), nullptr);
  } else {
    EXPECT_EQ(f->get_u64("general.alignment").value(), alignment);
    EXPECT_EQ(f->find("general.alignment")->type, VT::kUint32);
  }
  CheckTensors(*f);
  // Data section padded after every tensor, the last one included.
  EXPECT_EQ(f->file_size() % alignment, 0u);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignment, ::testing::Values(1u, 8u, 32u, 64u, 4096u));

TEST(GgufRoundTrip, ViewsAndDeferredTensors) {
  GgufWriter w(64);
  std::vector<std::vector<uint8_t>> keep;
  int fills = 0;
  for (size_t i = 0; i < Tensors().size(); ++i) {
    const TensorCase& c = Tensors()[i];
    if (i % 2 == 0) {
      keep.push_back(Pattern(BytesOf(c), i));
      ASSERT_TRUE(w.add_tensor_view(c.name, c.type, c.ne, keep.back()).ok());
    } else {
      ASSERT_TRUE(w.add_tensor_deferred(c.name, c.type, c.ne, [i, &fills](std::span<uint8_t> out) {
                     ++fills;
                     const auto p = Pattern(out.size(), i);
                     std::copy(p.begin(), p.end(), out.begin());
                     return Status();
                   }).ok());
    }
  }
  std::vector<uint8_t> storage;
  auto f = Reparse(w, &storage);
  ASSERT_NE(f, nullptr);
  CheckTensors(*f);
  EXPECT_EQ(fills, static_cast<int>(Tensors().size() / 2));
}

TEST(GgufRoundTrip, WriteIsAtomicAndDurable) {
  const std::string dir = testing::make_temp_dir("gguf-write");
  const std::string path = dir + "/model.gguf";
  GgufWriter w;
  w.set("general.name", V::str("first"));
  ASSERT_TRUE(w.add_tensor("a", GgmlType::F32, {4}, Pattern(16, 1)).ok());
  ASSERT_TRUE(w.write(path).ok());
  {
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ((*f)->path(), path);
    EXPECT_EQ((*f)->get_string("general.name").value(), "first");
    EXPECT_EQ((*f)->bytes().size(), w.serialize().value().size());
    EXPECT_TRUE(
        std::equal((*f)->bytes().begin(), (*f)->bytes().end(), w.serialize().value().begin()));
  }
  // A failing deferred tensor aborts the write: the old file stays, no temporary is left.
  GgufWriter bad;
  bad.set("general.name", V::str("second"));
  ASSERT_TRUE(bad.add_tensor_deferred("boom", GgmlType::F32, {4},
                                      [](std::span<uint8_t>) {
                                        return Status(StatusCode::kInternal, "quantizer failed");
                                      })
                  .ok());
  Status st = bad.write(path);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.to_string().find("tensor=boom"), std::string::npos) << st.to_string();
  auto still = GgufFile::open(path);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ((*still)->get_string("general.name").value(), "first");
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
  // Writing into a missing directory fails cleanly.
  EXPECT_FALSE(w.write(dir + "/missing/x.gguf").ok());
  EXPECT_EQ(GgufFile::open(dir + "/absent.gguf").status().code(), StatusCode::kNotFound);
  testing::remove_tree(dir);
}

TEST(GgufWriterValidation, RejectsBadTensors) {
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor("t", GgmlType::F32, {2}, Pattern(8, 0)).ok());
  auto code = [](const Status& s) { return s.code(); };
  EXPECT_EQ(code(w.add_tensor("t", GgmlType::F32, {2}, Pattern(8, 0))),
            StatusCode::kInvalidArgument);  // duplicate
  EXPECT_EQ(code(w.add_tensor("", GgmlType::F32, {2}, Pattern(8, 0))),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(w.add_tensor("bad\xff", GgmlType::F32, {2}, Pattern(8, 0))),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(w.add_tensor("u", GgmlType::F32, {3}, Pattern(8, 0))),
            StatusCode::kInvalidArgument);  // size mismatch
  EXPECT_EQ(code(w.add_tensor("u", GgmlType::F32, {}, {})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(w.add_tensor("u", GgmlType::F32, {1, 1, 1, 1, 1}, Pattern(4, 0))),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(w.add_tensor("u", GgmlType::Q4_0, {33}, {})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(w.add_tensor("u", static_cast<GgmlType>(4), {1}, Pattern(1, 0))),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(w.add_tensor("u", GgmlType::F32, {uint64_t{1} << 62, 4}, {})),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(w.add_tensor_view("u", GgmlType::F32, {uint64_t{1} << 61}, {})),
            StatusCode::kInvalidArgument);  // bytes overflow
  EXPECT_EQ(code(w.add_tensor_deferred("u", GgmlType::F32, {1}, nullptr)),
            StatusCode::kInvalidArgument);
  Status named = w.add_tensor("named", GgmlType::F32, {3}, Pattern(8, 0));
  EXPECT_NE(named.to_string().find("tensor=named"), std::string::npos) << named.to_string();
  EXPECT_EQ(w.tensor_count(), 1u);
}

TEST(GgufWriterValidation, RejectsBadMetadataAtWrite) {
  auto fails = [](uint32_t alignment, std::string key, GgufValue v, std::string_view needle) {
    GgufWriter w(alignment);
    w.set(std::move(key), std::move(v));
    auto r = w.serialize();
    if (r.ok()) return ::testing::AssertionFailure() << "serialize succeeded";
    if (r.status().code() != StatusCode::kInvalidArgument ||
        r.status().to_string().find(needle) == std::string::npos) {
      return ::testing::AssertionFailure() << r.status().to_string();
    }
    return ::testing::AssertionSuccess();
  };
  EXPECT_TRUE(fails(0, "k", V::u8(1), "alignment 0"));
  EXPECT_TRUE(fails(48, "k", V::u8(1), "alignment 48"));
  EXPECT_TRUE(fails(32, "", V::u8(1), "metadata key is empty"));
  EXPECT_TRUE(fails(32, "k\xc0\x80", V::u8(1), "UTF-8"));
  EXPECT_TRUE(fails(32, "k", GgufValue{VT::kUint8, uint64_t{256}}, "key=k"));
  EXPECT_TRUE(fails(32, "k", GgufValue{VT::kInt16, int64_t{40000}}, "out of range"));
  EXPECT_TRUE(fails(32, "k", GgufValue{VT::kBool, uint64_t{2}}, "out of range"));
  EXPECT_TRUE(fails(32, "k", GgufValue{VT::kUint32, int64_t{1}}, "wrong C++ alternative"));
  EXPECT_TRUE(fails(32, "k", GgufValue{static_cast<VT>(13), uint64_t{0}}, "invalid value type"));
  EXPECT_TRUE(fails(32, "k", GgufValue{VT::kFloat32, 1e300}, "out of range"));
  EXPECT_TRUE(fails(32, "k", V::array(VT::kUint8, {V::u8(1), V::i8(1)}), "element 1"));
  EXPECT_TRUE(fails(32, "general.alignment", V::u32(64), "general.alignment"));
  EXPECT_TRUE(fails(64, "general.alignment", V::u64(64), "general.alignment"));
  V deep = V::array(VT::kUint8, {});
  for (int i = 0; i < 8; ++i) deep = V::array(VT::kArray, {deep});
  EXPECT_TRUE(fails(32, "k", deep, "nested deeper"));

  // Setting general.alignment to the writer's own value is fine (re-serializing a file).
  GgufWriter w(64);
  w.set("general.alignment", V::u32(64));
  std::vector<uint8_t> storage;
  auto f = Reparse(w, &storage);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(f->alignment(), 64u);
}

}  // namespace
}  // namespace power
