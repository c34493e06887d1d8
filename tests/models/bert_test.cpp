// The BERT encoder against ../shared/fixtures/embeddings (see its README): for every model in
// the folder, token ids equal the peer's (llama.cpp), and our pooled vectors (raw and
// L2-normalized) and per-token hidden states are at least about as close to the exact float64
// reference as the peer's: max |ours - exact| <= 1.25 * max |peer - exact| + 1e-4, with the
// peer's figures read from meta.json. Batch invariance: all sentences in one forward pass give
// bit-identical vectors to each sentence alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "host/model.h"
#include "host/pooling.h"
#include "host/text.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace power {
namespace {

namespace fs = std::filesystem;

std::string emb_dir() {
  return testing::shared_dir() + "/fixtures/embeddings";
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
}

std::vector<std::string> fixture_models() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(emb_dir())) {
    if (e.path().extension() == ".gguf") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

LoadModelOptions encoder() {
  LoadModelOptions o;
  o.kind = sdk::ModelKind::kEncoder;
  return o;
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<text::Tokenizer> tok;
};

Loaded load(const std::string& name) {
  Loaded l;
  auto file = GgufFile::open(emb_dir() + "/" + name + ".gguf");
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  if (!file.ok()) return l;
  std::shared_ptr<const GgufFile> shared(std::move(*file));
  auto tok = load_tokenizer(*shared);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  auto model = load_model(shared, encoder());
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!tok.ok() || !model.ok()) return l;
  l.model = std::move(*model);
  l.tok = std::move(*tok);
  return l;
}

TEST(BertFixture, MatchesExactReferenceAtLeastAsWellAsThePeer) {
  POWER_REQUIRE_SHARED();
  const nlohmann::json tokens = read_json(emb_dir() + "/tokens.json");
  const nlohmann::json meta = read_json(emb_dir() + "/meta.json");
  ASSERT_TRUE(tokens.is_object() && meta.is_object());
  const auto models = fixture_models();
  ASSERT_FALSE(models.empty());
  for (const std::string& name : models) {
    SCOPED_TRACE(name);
    Loaded l = load(name);
    ASSERT_TRUE(l.model && l.tok);
    const ModelHparams& hp = l.model->hparams();
    const sdk::Pooling pooling_kind = l.model->spec().pooling;
    const int64_t E = hp.n_embd;
    ASSERT_EQ(meta["hparams"]["n_embd"].get<int64_t>(), E);
    const std::string pooling = meta["files"][name]["pooling"].get<std::string>();
    EXPECT_EQ(pooling, pooling_name(pooling_kind));

    // Token ids equal the peer's.
    std::vector<std::vector<int32_t>> ids;
    for (const auto& s : tokens["sentences"]) {
      std::vector<int32_t> want = s["ids"].get<std::vector<int32_t>>();
      text::EncodeOptions eo;
      eo.add_special = true;
      eo.parse_special = true;
      std::vector<int32_t> got = l.tok->encode(s["text"].get<std::string>(), eo);
      EXPECT_EQ(got, want) << "sentence " << s["index"];
      ids.push_back(want);
    }
    const size_t n_sent = ids.size();

    auto ws = l.model->make_workspace(1024, hp.n_ctx_train, 2);
    ASSERT_TRUE(ws.ok());
    // Each sentence alone.
    std::vector<float> raw(n_sent * static_cast<size_t>(E));
    for (size_t s = 0; s < n_sent; ++s) {
      std::span<const int32_t> seq(ids[s]);
      ASSERT_TRUE(l.model->encode(**ws, {&seq, 1}, pooling_kind, raw.data() + s * E).ok());
    }
    const auto exact = testing::read_f32(emb_dir() + "/" + name + ".emb-exact.f32");
    ASSERT_EQ(exact.size(), raw.size());
    const double peer_raw = meta["files"][name]["peer_vs_exact_raw"]["max_abs"].get<double>();
    const double ours_raw = max_abs_diff(raw.data(), exact.data(), raw.size());
    EXPECT_LE(ours_raw, 1.25 * peer_raw + 1e-4) << "peer " << peer_raw;
    std::printf("[ %s ] raw: ours %.3g, peer %.3g\n", name.c_str(), ours_raw, peer_raw);

    // Normalized, against the exact reference divided by its own L2 norm (in double).
    std::vector<float> norm = raw, exact_norm(exact.size());
    for (size_t s = 0; s < n_sent; ++s) {
      l2_normalize(norm.data() + s * E, E);
      double ss = 0;
      for (int64_t e = 0; e < E; ++e) ss += double(exact[s * E + e]) * exact[s * E + e];
      for (int64_t e = 0; e < E; ++e)
        exact_norm[s * E + e] = float(exact[s * E + e] / std::sqrt(ss));
    }
    const double peer_norm = meta["files"][name]["peer_vs_exact_norm"]["max_abs"].get<double>();
    const double ours_norm = max_abs_diff(norm.data(), exact_norm.data(), norm.size());
    EXPECT_LE(ours_norm, 1.25 * peer_norm + 1e-4) << "peer " << peer_norm;
    std::printf("[ %s ] normalized: ours %.3g, peer %.3g\n", name.c_str(), ours_norm, peer_norm);
    // The peer's own normalized file agrees with its raw file normalized our way.
    const auto peer_raw_v = testing::read_f32(emb_dir() + "/" + name + ".emb.f32");
    const auto peer_norm_v = testing::read_f32(emb_dir() + "/" + name + ".emb-norm.f32");
    ASSERT_EQ(peer_raw_v.size(), raw.size());
    std::vector<float> renorm = peer_raw_v;
    for (size_t s = 0; s < n_sent; ++s) l2_normalize(renorm.data() + s * E, E);
    EXPECT_LE(max_abs_diff(renorm.data(), peer_norm_v.data(), renorm.size()), 1e-7);

    // Per-token hidden states (pooling none), all sentences in one batch.
    std::vector<std::span<const int32_t>> seqs(ids.begin(), ids.end());
    std::vector<float> hidden(
        static_cast<size_t>(Model::output_rows(seqs, sdk::Pooling::kNone) * E));
    ASSERT_TRUE(l.model->encode(**ws, seqs, sdk::Pooling::kNone, hidden.data()).ok());
    const auto hidden_exact =
        testing::read_f32(emb_dir() + "/hidden/" + name + ".hidden-exact.f32");
    ASSERT_EQ(hidden_exact.size(), hidden.size());
    const double peer_hidden = meta["files"][name]["peer_vs_exact_hidden_max_abs"].get<double>();
    const double ours_hidden = max_abs_diff(hidden.data(), hidden_exact.data(), hidden.size());
    EXPECT_LE(ours_hidden, 1.25 * peer_hidden + 1e-4) << "peer " << peer_hidden;
    std::printf("[ %s ] hidden: ours %.3g, peer %.3g\n", name.c_str(), ours_hidden, peer_hidden);

    // Batch invariance: the pooled batch equals the sentences alone, bit for bit, in any order.
    std::vector<float> batched(raw.size());
    ASSERT_TRUE(l.model->encode(**ws, seqs, pooling_kind, batched.data()).ok());
    EXPECT_EQ(0, std::memcmp(batched.data(), raw.data(), raw.size() * sizeof(float)));
    std::vector<std::span<const int32_t>> rev(seqs.rbegin(), seqs.rend());
    ASSERT_TRUE(l.model->encode(**ws, rev, pooling_kind, batched.data()).ok());
    for (size_t s = 0; s < n_sent; ++s) {
      EXPECT_EQ(0, std::memcmp(batched.data() + (n_sent - 1 - s) * E, raw.data() + s * E,
                               static_cast<size_t>(E) * sizeof(float)))
          << "sentence " << s;
    }
  }
}

TEST(BertFixture, RejectsBadInputsAndKeepsWorking) {
  POWER_REQUIRE_SHARED();
  Loaded l = load("bert-mean-F16");
  ASSERT_TRUE(l.model);
  const ModelHparams& hp = l.model->hparams();
  auto ws = l.model->make_workspace(hp.n_ctx_train + 8, hp.n_ctx_train + 8, 1);
  ASSERT_TRUE(ws.ok());
  std::vector<float> out(static_cast<size_t>(hp.n_embd));
  std::vector<int32_t> too_long(static_cast<size_t>(hp.n_ctx_train + 1), 1000);
  std::span<const int32_t> s1(too_long);
  Status st = l.model->encode(**ws, {&s1, 1}, sdk::Pooling::kMean, out.data());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  std::vector<int32_t> bad_id{101, static_cast<int32_t>(hp.n_vocab), 102};
  std::span<const int32_t> s2(bad_id);
  st = l.model->encode(**ws, {&s2, 1}, sdk::Pooling::kMean, out.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  std::vector<int32_t> empty;
  std::span<const int32_t> s3(empty);
  st = l.model->encode(**ws, {&s3, 1}, sdk::Pooling::kMean, out.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  // Still works after the errors; CLS pooling is row 0 of the per-token states, last the last.
  std::vector<int32_t> ok{101, 7592, 2088, 1012, 102};
  std::span<const int32_t> s4(ok);
  std::vector<float> tokens(5 * static_cast<size_t>(hp.n_embd)), cls(out.size()), last(out.size());
  ASSERT_TRUE(l.model->encode(**ws, {&s4, 1}, sdk::Pooling::kNone, tokens.data()).ok());
  ASSERT_TRUE(l.model->encode(**ws, {&s4, 1}, sdk::Pooling::kCls, cls.data()).ok());
  ASSERT_TRUE(l.model->encode(**ws, {&s4, 1}, sdk::Pooling::kLast, last.data()).ok());
  EXPECT_EQ(0, std::memcmp(cls.data(), tokens.data(), cls.size() * sizeof(float)));
  EXPECT_EQ(0,
            std::memcmp(last.data(), tokens.data() + 4 * hp.n_embd, last.size() * sizeof(float)));
}

TEST(BertFixture, DecoderFilesAreRejectedWithAClearError) {
  POWER_REQUIRE_SHARED();
  int checked = 0;
  for (const auto& e :
       fs::recursive_directory_iterator(testing::shared_dir() + "/fixtures/models")) {
    if (e.path().extension() != ".gguf") continue;
    auto file = GgufFile::open(e.path().string());
    ASSERT_TRUE(file.ok());
    auto m = load_model(std::shared_ptr<const GgufFile>(std::move(*file)), encoder());
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kUnsupported);
    if (++checked == 3) break;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace power
