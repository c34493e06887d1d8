// Malformed GGUF input: every failure is a clear Status (code, byte offset, key or tensor)
// and never a crash, an abort or a huge allocation. Runs under ASan+UBSan in CI ("hostile").
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "format/gguf.h"
#include "gguf_test_util.h"

namespace power {
namespace {

using testing::ParseFails;
using testing::RawGguf;
using testing::TouchEverything;
using V = GgufValue;
using VT = GgufValueType;

constexpr uint64_t kHuge = uint64_t{1} << 60;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ4_0 = 2;

Result<std::unique_ptr<GgufFile>> Parse(const RawGguf& raw, const GgufLimits& limits = {}) {
  return GgufFile::parse(raw.span(), limits);
}

// A small valid file from our writer: metadata of several kinds and three tensors.
std::vector<uint8_t> SmallValidFile() {
  GgufWriter w;
  w.set("general.architecture", V::str("llama"));
  w.set("llama.context_length", V::u32(128));
  w.set("llama.rms_eps", V::f32(1e-5f));
  w.set("tokenizer.ggml.tokens", V::string_array({"<unk>", "<s>", "", "abc"}));
  w.set("tokenizer.ggml.scores", V::array(VT::kFloat32, {V::f32(0), V::f32(-1)}));
  w.set("nested", V::array(VT::kArray, {V::array(VT::kInt16, {V::i16(-2)})}));
  w.set("flag", V::boolean(true));
  std::vector<uint8_t> a(16 * 4, 1), b(2 * 18, 2), c(8 * 2, 3);
  EXPECT_TRUE(w.add_tensor("a", GgmlType::F32, {16}, a).ok());
  EXPECT_TRUE(w.add_tensor("b", GgmlType::Q4_0, {32, 2}, b).ok());
  EXPECT_TRUE(w.add_tensor("c", GgmlType::F16, {4, 2}, c).ok());
  return w.serialize().value();
}

// Header + one tensor info for `t0` with the given fields, then aligned data of `data_bytes`.
RawGguf OneTensor(std::initializer_list<uint64_t> ne, uint32_t type, uint64_t offset,
                  size_t data_bytes) {
  RawGguf r;
  r.header(3, 1, 0).tensor("t0", ne, type, offset).pad_to(32).zeros(data_bytes);
  return r;
}
// Where the fields of OneTensor's tensor info start.
constexpr uint64_t kInfoAt = 24;
constexpr uint64_t kDimsAt = kInfoAt + 8 + 2;

TEST(GgufHostile, EmptyAndTinyFiles) {
  RawGguf empty;
  EXPECT_TRUE(ParseFails(Parse(empty), StatusCode::kCorrupt, {"not a GGUF file", "offset=0"}));
  RawGguf three;
  three.raw("GGU");
  EXPECT_TRUE(ParseFails(Parse(three), StatusCode::kCorrupt, {"offset=0"}));
}

TEST(GgufHostile, BadMagic) {
  RawGguf r;
  r.raw("GGML").u32(3).u64(0).u64(0);
  EXPECT_TRUE(ParseFails(Parse(r), StatusCode::kCorrupt, {"magic", "47 47 4d 4c", "offset=0"}));
}

TEST(GgufHostile, BadVersions) {
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    RawGguf r;
    r.header(v, 0, 0);
    EXPECT_TRUE(
        ParseFails(Parse(r), StatusCode::kUnsupported, {fmt::format("version {}", v), "offset=4"}));
  }
  RawGguf v1;
  v1.header(1, 0, 0);
  EXPECT_TRUE(ParseFails(Parse(v1), StatusCode::kUnsupported, {"only versions 2 and 3"}));
  RawGguf big_endian;
  big_endian.header(0x03000000u, 0, 0);
  EXPECT_TRUE(ParseFails(Parse(big_endian), StatusCode::kUnsupported, {"big-endian"}));
  RawGguf v2;
  v2.header(2, 0, 0);
  auto ok = Parse(v2);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->version(), 2u);
}

TEST(GgufHostile, HugeCounts) {
  for (uint64_t n : {kHuge, kMax, uint64_t{1000}}) {
    RawGguf kv;
    kv.header(3, 0, n);
    EXPECT_TRUE(ParseFails(Parse(kv), StatusCode::kCorrupt, {"metadata count", "offset=16"}));
    RawGguf tensors;
    tensors.header(3, n, 0);
    EXPECT_TRUE(ParseFails(Parse(tensors), StatusCode::kCorrupt, {"tensor count", "offset=8"}));
  }
  // Each count alone fits, together they do not.
  RawGguf both;
  both.header(3, 2, 2).zeros(80);
  EXPECT_TRUE(ParseFails(Parse(both), StatusCode::kCorrupt, {"cannot fit", "offset=8"}));
}

TEST(GgufHostile, HugeAndOverlongStrings) {
  for (uint64_t len : {kHuge, kMax, uint64_t{70000}}) {
    RawGguf key;
    key.header(3, 0, 1).u64(len).zeros(16);
    EXPECT_TRUE(ParseFails(Parse(key), StatusCode::kCorrupt, {"metadata key", "offset=24"}));
  }
  RawGguf short_key;
  short_key.header(3, 0, 1).u64(100).raw("abcdefgh").zeros(8);
  EXPECT_TRUE(
      ParseFails(Parse(short_key), StatusCode::kCorrupt, {"runs past the end", "offset=24"}));
  for (uint64_t len : {kHuge, kMax, uint64_t{1000}}) {
    RawGguf value;
    value.header(3, 0, 1).str("k").u32(static_cast<uint32_t>(VT::kString)).u64(len).raw("xyz");
    EXPECT_TRUE(
        ParseFails(Parse(value), StatusCode::kCorrupt, {"string value", "offset=37", "key=k"}));
  }
  GgufLimits tight;
  tight.max_name_bytes = 4;
  RawGguf long_key;
  long_key.header(3, 0, 1).kv_u32("abcde", 1);
  EXPECT_TRUE(ParseFails(Parse(long_key, tight), StatusCode::kCorrupt, {"limit of 4"}));
}

TEST(GgufHostile, HugeArrayCounts) {
  for (VT elem : {VT::kUint8, VT::kString, VT::kArray, VT::kFloat64, VT::kBool}) {
    RawGguf r;
    r.header(3, 0, 1).str("k").u32(static_cast<uint32_t>(VT::kArray));
    r.u32(static_cast<uint32_t>(elem)).u64(kHuge).zeros(64);
    EXPECT_TRUE(ParseFails(Parse(r), StatusCode::kCorrupt, {"cannot fit", "offset=41", "key=k"}));
  }
  // An inner array's count is checked the same way.
  RawGguf nested;
  nested.header(3, 0, 1).str("k").u32(static_cast<uint32_t>(VT::kArray));
  nested.u32(static_cast<uint32_t>(VT::kArray)).u64(1);
  nested.u32(static_cast<uint32_t>(VT::kUint32)).u64(kMax).zeros(8);
  EXPECT_TRUE(ParseFails(Parse(nested), StatusCode::kCorrupt, {"cannot fit", "offset=53"}));
}

TEST(GgufHostile, MetadataMemoryLimit) {
  RawGguf r;
  r.header(3, 0, 1).str("k").u32(static_cast<uint32_t>(VT::kArray));
  r.u32(static_cast<uint32_t>(VT::kUint8)).u64(1000).zeros(1000);
  GgufLimits limits;
  limits.max_metadata_bytes = 16 * 1024;
  EXPECT_TRUE(
      ParseFails(Parse(r, limits), StatusCode::kResourceExhausted, {"limit of 16384", "key=k"}));
  EXPECT_TRUE(Parse(r).ok());
}

RawGguf NestedArrays(int depth) {
  RawGguf r;
  r.header(3, 0, 1).str("k").u32(static_cast<uint32_t>(VT::kArray));
  for (int i = 1; i < depth; ++i) r.u32(static_cast<uint32_t>(VT::kArray)).u64(1);
  r.u32(static_cast<uint32_t>(VT::kUint8)).u64(1).u8(7);
  return r;
}

TEST(GgufHostile, NestedArraysTooDeep) {
  auto ok = Parse(NestedArrays(8));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_TRUE(ParseFails(Parse(NestedArrays(9)), StatusCode::kCorrupt,
                         {"nested deeper than the limit of 8", "key=k"}));
  // Very deep nesting fails at the limit without recursing further.
  EXPECT_TRUE(ParseFails(Parse(NestedArrays(100000)), StatusCode::kCorrupt, {"nested deeper"}));
  GgufLimits flat;
  flat.max_array_depth = 1;
  EXPECT_TRUE(ParseFails(Parse(NestedArrays(2), flat), StatusCode::kCorrupt, {"nested deeper"}));
}

TEST(GgufHostile, InvalidValueTypes) {
  for (uint32_t t : {13u, 100u, 0xffffffffu}) {
    RawGguf r;
    r.header(3, 0, 1).str("k").u32(t).u32(0);
    EXPECT_TRUE(ParseFails(Parse(r), StatusCode::kCorrupt,
                           {"invalid metadata value type", "offset=33", "key=k"}));
    RawGguf arr;
    arr.header(3, 0, 1).str("k").u32(static_cast<uint32_t>(VT::kArray)).u32(t).u64(0);
    EXPECT_TRUE(
        ParseFails(Parse(arr), StatusCode::kCorrupt, {"invalid array element type", "offset=37"}));
  }
  RawGguf b;
  b.header(3, 0, 1).str("k").u32(static_cast<uint32_t>(VT::kBool)).u8(2);
  EXPECT_TRUE(ParseFails(Parse(b), StatusCode::kCorrupt, {"bool value is 2", "offset=37"}));
}

TEST(GgufHostile, DuplicateAndInvalidKeys) {
  RawGguf dup;
  dup.header(3, 0, 2).kv_u32("a.b", 1).kv_str("a.b", "x");
  EXPECT_TRUE(ParseFails(Parse(dup), StatusCode::kCorrupt,
                         {"duplicate metadata key", "key=a.b", "offset=43"}));
  RawGguf empty;
  empty.header(3, 0, 1).kv_u32("", 1);
  EXPECT_TRUE(ParseFails(Parse(empty), StatusCode::kCorrupt, {"key is empty", "offset=24"}));
  RawGguf bad_utf8;
  bad_utf8.header(3, 0, 1).kv_u32("k\xc0\xaf", 1);
  EXPECT_TRUE(ParseFails(Parse(bad_utf8), StatusCode::kCorrupt, {"UTF-8", "offset=24"}));
  // String values are raw bytes: invalid UTF-8 is kept, not rejected.
  RawGguf value;
  value.header(3, 0, 1).kv_str("k", "\xff\xfe");
  auto ok = Parse(value);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->get_string("k").value(), "\xff\xfe");
}

TEST(GgufHostile, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u, 0x80000001u}) {
    RawGguf r;
    r.header(3, 0, 1).kv_u32("general.alignment", a);
    EXPECT_TRUE(ParseFails(Parse(r), StatusCode::kCorrupt,
                           {"not a nonzero power of two", "key=general.alignment", "offset=53"}));
  }
  RawGguf wrong_type;
  wrong_type.header(3, 0, 1).str("general.alignment").u32(static_cast<uint32_t>(VT::kUint64));
  wrong_type.u64(32);
  EXPECT_TRUE(ParseFails(Parse(wrong_type), StatusCode::kCorrupt, {"must be a u32, not u64"}));
  RawGguf as_string;
  as_string.header(3, 0, 1).kv_str("general.alignment", "32");
  EXPECT_TRUE(ParseFails(Parse(as_string), StatusCode::kCorrupt, {"must be a u32"}));
}

TEST(GgufHostile, BadDimensionCounts) {
  for (uint32_t n : {0u, 5u, 0xffffffffu}) {
    RawGguf r;
    r.header(3, 1, 0).str("t0").u32(n).zeros(64);
    EXPECT_TRUE(ParseFails(Parse(r), StatusCode::kCorrupt,
                           {"dimensions, expected 1 to 4", "tensor=t0", "offset=34"}));
  }
}

TEST(GgufHostile, UnknownTypeIds) {
  for (uint32_t id : {4u, 5u, 31u, 99u, 0xffffffffu}) {
    auto r = OneTensor({32}, id, 0, 128);
    EXPECT_TRUE(ParseFails(
        Parse(r), StatusCode::kUnsupported,
        {fmt::format("type id {}", id), "tensor=t0", fmt::format("offset={}", kDimsAt + 4 + 8)}));
  }
  // Types in the table that Power cannot dequantize are still read.
  auto iq2 = OneTensor({256}, static_cast<uint32_t>(GgmlType::IQ2_XXS), 0, 66);
  EXPECT_TRUE(Parse(iq2).ok());
}

TEST(GgufHostile, OverflowingShapes) {
  const uint64_t ne_at = kDimsAt + 4;
  auto dim = OneTensor({uint64_t{1} << 63}, kF32, 0, 0);
  EXPECT_TRUE(ParseFails(Parse(dim), StatusCode::kCorrupt,
                         {"INT64_MAX", "tensor=t0", fmt::format("offset={}", ne_at)}));
  auto product = OneTensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0, 0);
  EXPECT_TRUE(ParseFails(Parse(product), StatusCode::kCorrupt, {"INT64_MAX", "tensor=t0"}));
  auto four = OneTensor({65536, 65536, 65536, 65536}, kF32, 0, 0);
  EXPECT_TRUE(ParseFails(Parse(four), StatusCode::kCorrupt, {"INT64_MAX"}));
  auto bytes = OneTensor({uint64_t{1} << 62}, kF32, 0, 0);  // 2^62 elements, 2^64 bytes
  EXPECT_TRUE(ParseFails(Parse(bytes), StatusCode::kCorrupt, {"byte size overflows", "tensor=t0"}));
  auto big = OneTensor({uint64_t{1} << 40, 1024}, kF32, 0, 64);  // fits in math, not in file
  EXPECT_TRUE(ParseFails(Parse(big), StatusCode::kCorrupt, {"past the end", "tensor=t0"}));
  auto block = OneTensor({33}, kQ4_0, 0, 64);
  EXPECT_TRUE(ParseFails(Parse(block), StatusCode::kCorrupt,
                         {"not a multiple of the Q4_0 block size 32", "tensor=t0"}));
}

TEST(GgufHostile, MisalignedOffsets) {
  const uint64_t off_at = kDimsAt + 4 + 8 + 4;
  for (uint64_t off : {uint64_t{1}, uint64_t{16}, uint64_t{33}, kMax}) {
    auto r = OneTensor({8}, kF32, off, 128);
    EXPECT_TRUE(ParseFails(
        Parse(r), StatusCode::kCorrupt,
        {"not a multiple of the alignment 32", "tensor=t0", fmt::format("offset={}", off_at)}));
  }
  RawGguf a64;
  a64.header(3, 1, 1).kv_u32("general.alignment", 64).tensor("t0", {8}, kF32, 32);
  a64.pad_to(64).zeros(128);
  EXPECT_TRUE(ParseFails(Parse(a64), StatusCode::kCorrupt, {"alignment 64", "tensor=t0"}));
}

TEST(GgufHostile, DataBeyondEndOfFile) {
  auto short_data = OneTensor({16}, kF32, 0, 32);  // needs 64
  EXPECT_TRUE(ParseFails(Parse(short_data), StatusCode::kCorrupt,
                         {"runs past the end of the file", "tensor=t0"}));
  for (uint64_t off : {uint64_t{1} << 40, (kMax / 32) * 32, uint64_t{1} << 63}) {
    auto r = OneTensor({8}, kF32, off, 32);
    EXPECT_TRUE(ParseFails(Parse(r), StatusCode::kCorrupt, {"past the end", "tensor=t0"}));
  }
  // The data section itself starts past the end: no padding and a non-empty tensor.
  RawGguf no_pad;
  no_pad.header(3, 1, 0).tensor("t0", {1}, kF32, 0);
  EXPECT_TRUE(ParseFails(Parse(no_pad), StatusCode::kCorrupt, {"past the end"}));
}

TEST(GgufHostile, OverlappingTensors) {
  RawGguf r;
  r.header(3, 2, 0).tensor("t0", {16}, kF32, 0).tensor("t1", {16}, kF32, 32);
  r.pad_to(32).zeros(128);
  EXPECT_TRUE(ParseFails(Parse(r), StatusCode::kCorrupt, {"overlaps tensor 't0'", "tensor=t1"}));
  RawGguf same;  // listed in reverse order of their offsets: still caught
  same.header(3, 2, 0).tensor("t0", {8}, kF32, 64).tensor("t1", {32}, kF32, 0);
  same.pad_to(32).zeros(128);
  EXPECT_TRUE(ParseFails(Parse(same), StatusCode::kCorrupt, {"overlaps", "tensor=t0"}));
  RawGguf ok;  // out of order but disjoint, with a gap: accepted
  ok.header(3, 2, 0).tensor("t0", {8}, kF32, 96).tensor("t1", {8}, kF32, 0);
  ok.pad_to(32).zeros(128);
  auto f = Parse(ok);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->tensors()[0].offset, 96u);
}

TEST(GgufHostile, DuplicateAndInvalidTensorNames) {
  RawGguf dup;
  dup.header(3, 2, 0).tensor("t0", {8}, kF32, 0).tensor("t0", {8}, kF32, 32);
  dup.pad_to(32).zeros(64);
  EXPECT_TRUE(ParseFails(Parse(dup), StatusCode::kCorrupt,
                         {"duplicate tensor name", "tensor=t0", "offset=58"}));
  RawGguf empty;
  empty.header(3, 1, 0).tensor("", {8}, kF32, 0).pad_to(32).zeros(32);
  EXPECT_TRUE(ParseFails(Parse(empty), StatusCode::kCorrupt, {"tensor name is empty"}));
  RawGguf bad;
  bad.header(3, 1, 0).tensor("t\xff", {8}, kF32, 0).pad_to(32).zeros(32);
  EXPECT_TRUE(ParseFails(Parse(bad), StatusCode::kCorrupt, {"UTF-8", "offset=24"}));
}

TEST(GgufHostile, ZeroSizedTensorsAreAllowed) {
  RawGguf r;
  r.header(3, 3, 0).tensor("e0", {0}, kF32, 0).tensor("e1", {32, 0}, /*Q8_0*/ 8, 0);
  r.tensor("t", {8}, kF32, 0).pad_to(32).zeros(32);
  auto f = Parse(r);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->find_tensor("e0")->n_bytes, 0u);
  EXPECT_EQ((*f)->find_tensor("e1")->n_elements(), 0u);
  EXPECT_EQ((*f)->find_tensor("t")->n_bytes, 32u);
  // A zero-sized tensor must still point inside the file.
  RawGguf far;
  far.header(3, 1, 0).tensor("e0", {0}, kF32, 1024).pad_to(32);
  EXPECT_TRUE(ParseFails(Parse(far), StatusCode::kCorrupt, {"past the end", "tensor=e0"}));
}

TEST(GgufHostile, VocabOnlyFileWithoutPadding) {
  RawGguf r;
  r.header(3, 0, 1).kv_str("tokenizer.ggml.model", "llama");
  ASSERT_NE(r.size() % 32, 0u);
  auto f = Parse(r);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_GE((*f)->data_offset(), r.size());
}

// A hand-made file whose section offsets are known: header [0, 24), key "a" [24, 41), key "b"
// [41, 262) with its 200-byte string value's length at 54, tensor info t0 [262, 296), padding
// to 320, 32 bytes of data [320, 352).
RawGguf KnownLayout() {
  RawGguf r;
  r.header(3, 1, 2).kv_u32("a", 1).kv_str("b", std::string(200, 'x'));
  r.tensor("t0", {8}, kF32, 0).pad_to(32).zeros(32);
  return r;
}

TEST(GgufHostile, TruncatedAtSectionBoundaries) {
  const RawGguf full = KnownLayout();
  ASSERT_EQ(full.size(), 352u);
  ASSERT_TRUE(Parse(full).ok());
  struct Cut {
    size_t at;
    std::vector<std::string> needles;
  };
  const std::vector<Cut> cuts = {
      {0, {"not a GGUF file", "offset=0"}},
      {4, {"truncated: version", "offset=4"}},
      {8, {"truncated: tensor count", "offset=8"}},
      {16, {"truncated: metadata key-value count", "offset=16"}},
      // Up to 24 + 2 * 14 + 33 bytes the counts themselves are impossible.
      {24, {"metadata count 2 is impossible", "offset=16"}},
      {41, {"metadata count 2 is impossible", "offset=16"}},
      {100, {"string value of 200 bytes runs past the end", "offset=54", "key=b"}},
      {262, {"truncated: tensor name", "offset=262"}},
      {270, {"tensor name of 2 bytes runs past the end", "offset=262"}},
      {272, {"truncated: tensor dimension count", "offset=272", "tensor=t0"}},
      {280, {"truncated: tensor dimension", "offset=276", "tensor=t0"}},
      {292, {"truncated: tensor data offset", "offset=288", "tensor=t0"}},
      {296, {"runs past the end of the file", "offset=288", "tensor=t0"}},
      {320, {"runs past the end of the file", "tensor=t0"}},
      {351, {"runs past the end of the file", "tensor=t0"}},
  };
  for (const Cut& c : cuts) {
    std::vector<uint8_t> cut(full.bytes.begin(), full.bytes.begin() + c.at);
    auto r = GgufFile::parse(cut);
    ASSERT_FALSE(r.ok()) << "cut at " << c.at;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().to_string();
    for (const std::string& n : c.needles) {
      EXPECT_NE(r.status().to_string().find(n), std::string::npos)
          << "cut at " << c.at << ": '" << n << "' not in " << r.status().to_string();
    }
  }
}

TEST(GgufHostile, TruncatedAtEveryByte) {
  const auto full = SmallValidFile();
  auto whole = GgufFile::parse(full);
  ASSERT_TRUE(whole.ok());
  const GgufTensor& last = (*whole)->tensors().back();
  const uint64_t needed = last.file_offset + last.n_bytes;  // trailing padding is optional
  for (size_t n = 0; n < full.size(); ++n) {
    // A copy of exactly n bytes, so ASan sees any read past it.
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    auto r = GgufFile::parse(cut);
    if (n < needed) {
      ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
      EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().to_string();
      EXPECT_NE(r.status().to_string().find("offset="), std::string::npos);
    } else {
      ASSERT_TRUE(r.ok()) << n << ": " << r.status().to_string();
    }
  }
}

// Overwrites every 4-aligned position of a valid file with interesting 32- and 64-bit values.
TEST(GgufHostile, InterestingValuesEverywhere) {
  const auto full = SmallValidFile();
  auto whole = GgufFile::parse(full);
  ASSERT_TRUE(whole.ok());
  const size_t header_end = static_cast<size_t>((*whole)->data_offset());
  const uint64_t values[] = {0,
                             1,
                             2,
                             3,
                             4,
                             7,
                             8,
                             9,
                             12,
                             13,
                             31,
                             32,
                             33,
                             0x7f,
                             0x80,
                             0xff,
                             0xffff,
                             0x7fffffff,
                             0x80000000,
                             0xffffffff,
                             uint64_t{1} << 32,
                             kHuge,
                             uint64_t{1} << 62,
                             uint64_t{1} << 63,
                             kMax};
  size_t parsed = 0;
  for (size_t pos = 0; pos + 4 <= header_end; pos += 4) {
    for (uint64_t v : values) {
      for (size_t width : {size_t{4}, size_t{8}}) {
        if (pos + width > full.size()) continue;
        std::vector<uint8_t> m = full;
        std::memcpy(m.data() + pos, &v, width);
        auto r = GgufFile::parse(m);
        if (r.ok()) {
          ++parsed;
          TouchEverything(**r);
        } else {
          EXPECT_FALSE(r.status().message().empty());
        }
      }
    }
  }
  EXPECT_GT(parsed, 0u);
}

TEST(GgufHostile, RandomMutations) {
  const auto full = SmallValidFile();
  std::mt19937_64 rng(1234);
  size_t parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> m = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) m[rng() % m.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) m.resize(rng() % m.size());
    auto r = GgufFile::parse(m);
    if (r.ok()) {
      ++parsed;
      TouchEverything(**r);
    }
  }
  EXPECT_GT(parsed, 0u);
}

TEST(GgufHostile, OpenNonRegularFiles) {
  EXPECT_FALSE(GgufFile::open("/").ok());
  EXPECT_EQ(GgufFile::open("/nonexistent/x.gguf").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace power
