// Receipts and acceptance policies through the embedded runtime on real models (../shared):
// the receipt's fields against values computed here independently, tampering (every byte),
// the wrong key, another model file, policy refusals before any compute, and replay of 20
// recorded requests (greedy and seeded, some recorded while other requests ran in the same
// batches) reproducing every output digest.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "base/file.h"
#include "base/sha256.h"
#include "format/ggml_types.h"
#include "format/gguf.h"
#include "power/runtime.h"
#include "receipt/canonical_json.h"
#include "receipt/receipt.h"
#include "test_util.h"

namespace power {
namespace {

std::string stories_f32() {
  return testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
}
std::string stories_f16() {
  return testing::shared_dir() + "/models/stories260K/stories260K-F16.gguf";
}

class ReceiptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = testing::make_temp_dir("power_receipt_rt");
    keys_dir_ = home_ + "/keys";
  }
  void TearDown() override { testing::remove_tree(home_); }

  std::unique_ptr<Runtime> runtime() {
    RuntimeOptions ro;
    ro.keys_dir = keys_dir_;
    ro.tensor_manifest_dir = home_ + "/tensors";
    auto rt = Runtime::create(ro);
    EXPECT_TRUE(rt.ok());
    return std::move(*rt);
  }
  receipt::PublicKey public_key() {
    auto k = receipt::SigningKey::load_or_create(keys_dir_);
    EXPECT_TRUE(k.ok());
    return (*k)->public_key();
  }
  static LoadOptions opts(int threads, int max_running = 1) {
    LoadOptions o;
    o.n_ctx = 128;  // the llama fixture's training context
    o.threads = threads;
    o.max_running = max_running;
    return o;
  }
  std::string home_, keys_dir_;
};

GenerateRequest greedy(const std::string& prompt, int n) {
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.sampling.temperature = 0;
  r.want_receipt = true;
  return r;
}

// LE int32 bytes, hashed: the token digest as docs/RECEIPTS.md defines it.
std::string ids_digest(const std::vector<int32_t>& ids) {
  std::string bytes;
  for (int32_t id : ids) {
    for (int b = 0; b < 4; ++b)
      bytes.push_back(static_cast<char>((static_cast<uint32_t>(id) >> (8 * b)) & 0xFF));
  }
  return sha256_hex(bytes);
}

bool all_pass(const std::vector<receipt::VerifyCheck>& checks) {
  return !checks.empty() &&
         std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.ok; });
}

std::string failures(const std::vector<receipt::VerifyCheck>& checks) {
  std::string s;
  for (const auto& c : checks) {
    if (!c.ok) s += c.name + ": " + c.detail + "\n";
  }
  return s;
}

TEST_F(ReceiptTest, FieldsMatchIndependentValues) {
  POWER_REQUIRE_SHARED();
  auto rt = runtime();
  auto m = rt->load(stories_f32(), opts(2));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  GenerateRequest req = greedy("Once upon a time", 24);
  req.stop = {"zebra"};
  auto h = rt->submit(*m, req);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  Completion c = h->wait();
  ASSERT_TRUE(c.status.ok());
  ASSERT_FALSE(c.receipt.empty());
  auto parsed = receipt::parse_json_strict(c.receipt);
  ASSERT_TRUE(parsed.ok());
  const nlohmann::json& r = *parsed;
  EXPECT_EQ(r["schema"], "power.receipt.v1");
  auto file_digest = sha256_file(stories_f32());
  ASSERT_TRUE(file_digest.ok());
  EXPECT_EQ(r["model"]["sha256"], to_hex(*file_digest));
  EXPECT_EQ(r["model"]["format"], "gguf");
  EXPECT_EQ(r["model"]["arch"], "llama");

  // Tensor identities, written out here by hand: sorted by name, one object per tensor with
  // members in canonical order (name, sha256, shape, type).
  auto file = GgufFile::open(stories_f32());
  ASSERT_TRUE(file.ok());
  std::vector<const GgufTensor*> ts;
  for (const auto& t : (*file)->tensors()) ts.push_back(&t);
  std::sort(ts.begin(), ts.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::string ids = "[";
  for (const GgufTensor* t : ts) {
    std::string shape;
    for (uint64_t d : t->ne) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    ids += fmt::format("{}{{\"name\":\"{}\",\"sha256\":\"{}\",\"shape\":[{}],\"type\":\"{}\"}}",
                       ids.size() > 1 ? "," : "", t->name, to_hex(sha256(t->data, t->n_bytes)),
                       shape, ggml_type_name(t->type));
  }
  ids += "]";
  EXPECT_EQ(r["model"]["tensors_sha256"], sha256_hex(ids));
  EXPECT_EQ(r["model"]["n_tensors"], ts.size());

  EXPECT_EQ(r["input"]["kind"], "prompt");
  EXPECT_EQ(r["input"]["sha256"], sha256_hex("Once upon a time"));
  // The peer's (llama.cpp) token ids for this prompt with BOS, ../shared/models/stories260K.
  EXPECT_EQ(r["input"]["tokens_sha256"], ids_digest(m->tokenize("Once upon a time", true)));
  EXPECT_EQ(r["output"]["tokens_sha256"], ids_digest(c.tokens));
  EXPECT_EQ(r["output"]["text_sha256"], sha256_hex(c.text));
  EXPECT_EQ(r["output"]["n_tokens"], c.tokens.size());
  EXPECT_EQ(r["output"]["finish"], "length");

  const nlohmann::json& cfg = r["config"];
  EXPECT_EQ(cfg["sampling"]["temperature"], 0.0);
  EXPECT_EQ(cfg["sampling"]["top_p"], static_cast<double>(0.95f));  // exact binary32 value
  EXPECT_EQ(cfg["sampling"]["seed"], "0");
  EXPECT_EQ(cfg["sampling"]["mode"], "greedy");
  EXPECT_EQ(cfg["max_tokens"], 24);
  EXPECT_EQ(cfg["stop"], nlohmann::json::array({"zebra"}));
  EXPECT_EQ(cfg["threads"], 2);
  EXPECT_EQ(cfg["kv_type"], "f16");
  EXPECT_EQ(cfg["n_ctx"], 128);
  EXPECT_EQ(cfg["power_version"], POWER_VERSION);
  EXPECT_EQ(cfg["speculative"]["enabled"], false);
  EXPECT_TRUE(cfg["nondeterminism"].empty());
  EXPECT_TRUE(cfg["chat_template_sha256"].is_null());
  EXPECT_EQ(r["device"]["kind"], "cpu");
  EXPECT_GT(r["device"]["memory_bytes"].get<uint64_t>(), 0u);

  receipt::VerifyOptions vo;
  vo.public_key = public_key();
  vo.request_json = R"({"prompt":"Once upon a time"})";
  vo.output_text = c.text;
  vo.model_sha256 = to_hex(*file_digest);
  auto checks = receipt::verify_receipt(c.receipt, vo);
  EXPECT_TRUE(all_pass(checks)) << failures(checks);
  EXPECT_EQ(checks.size(), 6u);  // canonical, schema, signature, model, input, output

  // Not asked for: no receipt.
  GenerateRequest plain = greedy("Once upon a time", 4);
  plain.want_receipt = false;
  auto h2 = rt->submit(*m, plain);
  ASSERT_TRUE(h2.ok());
  EXPECT_TRUE(h2->wait().receipt.empty());
}

// The tensor digests are hashed once per artifact: the first receipt writes the per-tensor
// manifest (RuntimeOptions::tensor_manifest_dir, default $POWER_HOME/tensors) and a later
// process's receipts take model.tensors_sha256 from it, the same value. "none" writes nothing.
TEST_F(ReceiptTest, TensorDigestsAreCachedPerArtifactAndReused) {
  POWER_REQUIRE_SHARED();
  auto file_digest = sha256_file(stories_f32());
  ASSERT_TRUE(file_digest.ok());
  const std::string digest = to_hex(*file_digest);
  auto receipt_of = [&](Runtime& rt) {
    auto m = rt.load(stories_f32(), opts(1));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return nlohmann::json();
    auto h = rt.submit(*m, greedy("Once upon a time", 4));
    EXPECT_TRUE(h.ok());
    if (!h.ok()) return nlohmann::json();
    Completion c = h->wait();
    EXPECT_TRUE(c.status.ok());
    auto r = receipt::parse_json_strict(c.receipt);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : nlohmann::json();
  };
  const std::string cached = home_ + "/tensors/sha256-" + digest + ".json";
  nlohmann::json first = receipt_of(*runtime());
  auto text = read_file_text(cached);
  ASSERT_TRUE(text.ok()) << cached;
  const auto manifest = nlohmann::json::parse(*text);
  EXPECT_EQ(manifest["artifact_sha256"], digest);
  // The cached digests are the tensors' bytes in the file.
  auto file = GgufFile::open(stories_f32());
  ASSERT_TRUE(file.ok());
  ASSERT_EQ(manifest["tensors"].size(), (*file)->tensors().size());
  for (size_t i = 0; i < (*file)->tensors().size(); ++i) {
    const GgufTensor& t = (*file)->tensors()[i];
    EXPECT_EQ(manifest["tensors"][i]["name"], t.name);
    EXPECT_EQ(manifest["tensors"][i]["sha256"], to_hex(sha256(t.data, t.n_bytes))) << t.name;
  }
  nlohmann::json second = receipt_of(*runtime());
  EXPECT_EQ(second["model"]["tensors_sha256"], first["model"]["tensors_sha256"]);
  EXPECT_EQ(*read_file_text(cached), *text);

  // The default is $POWER_HOME/tensors; "none" caches nothing.
  const std::string power_home = home_ + "/ph";
  ::setenv("POWER_HOME", power_home.c_str(), 1);
  for (const std::string dir : {"", "none"}) {
    RuntimeOptions ro;
    ro.keys_dir = keys_dir_;
    ro.tensor_manifest_dir = dir;
    auto rt = Runtime::create(ro);
    ASSERT_TRUE(rt.ok());
    nlohmann::json r = receipt_of(**rt);
    EXPECT_EQ(r["model"]["tensors_sha256"], first["model"]["tensors_sha256"]);
    EXPECT_EQ(std::filesystem::exists(power_home + "/tensors/sha256-" + digest + ".json"),
              dir.empty())
        << "tensor_manifest_dir \"" << dir << "\"";
    testing::remove_tree(power_home);
  }
  ::unsetenv("POWER_HOME");
}

TEST_F(ReceiptTest, ChatReceiptBindsTheTemplateAndMessages) {
  POWER_REQUIRE_SHARED();
  auto rt = runtime();
  auto m = rt->load(stories_f32(), opts(1));
  ASSERT_TRUE(m.ok());
  GenerateRequest req = greedy("", 8);
  ChatMessage u;
  u.role = "user";
  u.content = "Hi \"there\"";
  req.messages = {u};
  auto h = rt->submit(*m, req);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  Completion c = h->wait();
  auto r = receipt::parse_json_strict(c.receipt);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["input"]["kind"], "messages");
  EXPECT_EQ((*r)["input"]["sha256"], sha256_hex(R"([{"content":"Hi \"there\"","role":"user"}])"));
  EXPECT_TRUE((*r)["config"]["chat_template_sha256"].is_string());
  receipt::VerifyOptions vo;
  vo.public_key = public_key();
  vo.request_json = R"({"model":"x","messages":[{"role":"user","content":"Hi \"there\""}]})";
  EXPECT_TRUE(all_pass(receipt::verify_receipt(c.receipt, vo)));
  vo.request_json = R"({"messages":[{"role":"user","content":"Hi 'there'"}]})";
  auto checks = receipt::verify_receipt(c.receipt, vo);
  EXPECT_FALSE(all_pass(checks));
  EXPECT_NE(failures(checks).find("input"), std::string::npos);
}

TEST_F(ReceiptTest, AnyFlippedByteIsRejected) {
  POWER_REQUIRE_SHARED();
  auto rt = runtime();
  auto m = rt->load(stories_f32(), opts(1));
  ASSERT_TRUE(m.ok());
  auto h = rt->submit(*m, greedy("The cat sat", 16));
  ASSERT_TRUE(h.ok());
  const std::string good = h->wait().receipt;
  receipt::VerifyOptions vo;
  vo.public_key = public_key();
  ASSERT_TRUE(all_pass(receipt::verify_receipt(good, vo)));
  ASSERT_TRUE(all_pass(receipt::verify_receipt(good + "\n", vo)));  // as files end
  // Every byte, three ways: the lowest bit, the case bit ('e' -> 'E' keeps a number's value,
  // which the canonical-form check catches), and all bits.
  size_t rejected = 0, tried = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x20}, uint8_t{0xFF}}) {
      std::string bad = good;
      bad[i] = static_cast<char>(static_cast<uint8_t>(bad[i]) ^ mask);
      ++tried;
      if (!all_pass(receipt::verify_receipt(bad, vo))) {
        ++rejected;
      } else {
        ADD_FAILURE() << "accepted with byte " << i << " ^ " << int(mask) << ": " << bad;
      }
    }
  }
  EXPECT_EQ(rejected, tried);
  // A removed or added byte, too.
  EXPECT_FALSE(all_pass(receipt::verify_receipt(good.substr(1), vo)));
  EXPECT_FALSE(all_pass(receipt::verify_receipt(good.substr(0, good.size() - 1), vo)));
  EXPECT_FALSE(all_pass(receipt::verify_receipt(" " + good, vo)));
}

TEST_F(ReceiptTest, WrongKeyOrAnotherModelFileIsRejected) {
  POWER_REQUIRE_SHARED();
  auto rt = runtime();
  auto m = rt->load(stories_f32(), opts(1));
  ASSERT_TRUE(m.ok());
  auto h = rt->submit(*m, greedy("The cat sat", 8));
  ASSERT_TRUE(h.ok());
  const std::string rec = h->wait().receipt;

  receipt::VerifyOptions vo;
  auto other = receipt::SigningKey::load_or_create(home_ + "/other-keys");
  ASSERT_TRUE(other.ok());
  vo.public_key = (*other)->public_key();
  auto checks = receipt::verify_receipt(rec, vo);
  EXPECT_FALSE(all_pass(checks));
  EXPECT_NE(failures(checks).find("signature: signed by"), std::string::npos) << failures(checks);
  vo.public_key.reset();  // no trusted key: not accepted either
  EXPECT_FALSE(all_pass(receipt::verify_receipt(rec, vo)));

  // Re-signed by another key after editing: the trusted key still rejects it.
  auto parsed = receipt::parse_json_strict(rec);
  ASSERT_TRUE(parsed.ok());
  nlohmann::json body = *parsed;
  body.erase("signature");
  body["output"]["n_tokens"] = 9;
  auto forged = receipt::sign_receipt(body, **other);
  ASSERT_TRUE(forged.ok());
  vo.public_key = public_key();
  EXPECT_FALSE(all_pass(receipt::verify_receipt(*forged, vo)));

  auto f16 = sha256_file(stories_f16());
  ASSERT_TRUE(f16.ok());
  vo.model_sha256 = to_hex(*f16);
  checks = receipt::verify_receipt(rec, vo);
  EXPECT_FALSE(all_pass(checks));
  EXPECT_NE(failures(checks).find("model: the model file's sha256"), std::string::npos);
}

TEST_F(ReceiptTest, PolicyRefusesBeforeAnyCompute) {
  POWER_REQUIRE_SHARED();
  auto rt = runtime();
  auto m = rt->load(stories_f32(), opts(1));
  ASSERT_TRUE(m.ok());
  auto f16 = sha256_file(stories_f16());
  ASSERT_TRUE(f16.ok());
  struct Case {
    std::string policy_json, reason;
  };
  const std::vector<Case> cases = {
      {R"({"allowed_model_sha256":[")" + to_hex(*f16) + R"("]})", "is not in allowed_model_sha256"},
      {R"({"min_power_version":"99.0"})", "older than min_power_version 99.0"},
      {R"({"allowed_devices":["cuda"]})", "is not in allowed_devices"},
  };
  for (const Case& c : cases) {
    auto policy = parse_acceptance_policy(c.policy_json);
    ASSERT_TRUE(policy.ok()) << c.policy_json;
    GenerateRequest req = greedy("Once upon a time", 8);
    req.policy = *policy;
    auto h = rt->submit(*m, req);
    ASSERT_FALSE(h.ok()) << c.policy_json;
    EXPECT_EQ(h.status().code(), StatusCode::kPolicyRefused);
    EXPECT_NE(h.status().message().find(c.reason), std::string::npos) << h.status().to_string();
  }
  EXPECT_EQ(m->stats().steps, 0u);  // nothing ran

  // A policy the model and configuration meet: it runs, and the receipt passes verify with the
  // same policy.
  auto ok_policy = parse_acceptance_policy(
      R"({"allowed_model_sha256":[")" + m->info().sha256 +
      R"("],"min_power_version":"0.1","require_signature":true,"allowed_devices":["cpu"],"require_deterministic":true})");
  ASSERT_TRUE(ok_policy.ok());
  GenerateRequest req = greedy("Once upon a time", 8);
  req.want_receipt = false;  // require_signature alone asks for the receipt
  req.policy = *ok_policy;
  auto h = rt->submit(*m, req);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  Completion c = h->wait();
  ASSERT_FALSE(c.receipt.empty());
  receipt::VerifyOptions vo;
  vo.public_key = public_key();
  vo.policy = *ok_policy;
  auto checks = receipt::verify_receipt(c.receipt, vo);
  EXPECT_TRUE(all_pass(checks)) << failures(checks);
  vo.policy = *parse_acceptance_policy(R"({"min_power_version":"99"})");
  EXPECT_FALSE(all_pass(receipt::verify_receipt(c.receipt, vo)));

  // Deterministic execution: a deadline makes the outcome depend on the load.
  auto det = parse_acceptance_policy(R"({"require_deterministic":true})");
  ASSERT_TRUE(det.ok());
  GenerateRequest with_deadline = greedy("Once upon a time", 8);
  with_deadline.policy = *det;
  with_deadline.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  auto hd = rt->submit(*m, with_deadline);
  ASSERT_FALSE(hd.ok());
  EXPECT_EQ(hd.status().code(), StatusCode::kPolicyRefused);
  EXPECT_NE(hd.status().message().find("deadline"), std::string::npos);
}

TEST_F(ReceiptTest, DeterminismNeedsAFixedThreadCount) {
  POWER_REQUIRE_SHARED();
  auto rt = runtime();
  auto m = rt->load(stories_f32(), opts(0));  // all cores
  ASSERT_TRUE(m.ok());
  GenerateRequest req = greedy("Once upon a time", 8);
  req.policy = *parse_acceptance_policy(R"({"require_deterministic":true})");
  auto h = rt->submit(*m, req);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kPolicyRefused);
  EXPECT_NE(h.status().message().find("thread count is not fixed"), std::string::npos);
  // Without the policy it runs, and its receipt says why it is not deterministic, so verify
  // with the policy refuses it too.
  req.policy.reset();
  auto h2 = rt->submit(*m, req);
  ASSERT_TRUE(h2.ok());
  Completion c = h2->wait();
  receipt::VerifyOptions vo;
  vo.public_key = public_key();
  vo.policy = *parse_acceptance_policy(R"({"require_deterministic":true})");
  auto checks = receipt::verify_receipt(c.receipt, vo);
  EXPECT_NE(failures(checks).find("policy: refused by the caller's policy: require_deterministic"),
            std::string::npos)
      << failures(checks);
}

TEST_F(ReceiptTest, SignatureRequiredButNoKeyIsRefused) {
  POWER_REQUIRE_SHARED();
  RuntimeOptions ro;
  ro.keys_dir = "/proc/no-such-dir/keys";  // cannot be created
  auto rt = Runtime::create(ro);
  ASSERT_TRUE(rt.ok());
  auto m = (*rt)->load(stories_f32(), opts(1));
  ASSERT_TRUE(m.ok());
  GenerateRequest req = greedy("Once upon a time", 4);
  req.want_receipt = false;
  req.policy = *parse_acceptance_policy(R"({"require_signature":true})");
  auto h = (*rt)->submit(*m, req);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kPolicyRefused);
  EXPECT_NE(h.status().message().find("require_signature"), std::string::npos);
  // Asking for a receipt without a usable key is an error, not a silent unsigned run.
  GenerateRequest want = greedy("Once upon a time", 4);
  EXPECT_FALSE((*rt)->submit(*m, want).ok());
}

TEST(AcceptancePolicy, ParsingIsStrict) {
  EXPECT_TRUE(parse_acceptance_policy("{}").ok());
  EXPECT_FALSE(parse_acceptance_policy(R"({"require_signatur":true})").ok());  // misspelt
  EXPECT_FALSE(parse_acceptance_policy(R"({"require_signature":"yes"})").ok());
  EXPECT_FALSE(parse_acceptance_policy(R"({"allowed_model_sha256":["abc"]})").ok());
  EXPECT_FALSE(parse_acceptance_policy(R"({"allowed_devices":"cpu"})").ok());
  EXPECT_FALSE(parse_acceptance_policy(R"({"min_power_version":"latest"})").ok());
  EXPECT_FALSE(parse_acceptance_policy(R"([])").ok());
  EXPECT_FALSE(parse_acceptance_policy("{").ok());
  auto p =
      parse_acceptance_policy(R"({"allowed_model_sha256":[")" + std::string(64, 'A') + R"("]})");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->allowed_model_sha256[0], std::string(64, 'a'));
  EXPECT_EQ(*receipt::compare_versions("0.10.0", "0.9.9"), 1);
  EXPECT_EQ(*receipt::compare_versions("1.0", "1.0.0"), 0);
  EXPECT_EQ(*receipt::compare_versions("0.1.0", "0.1.1"), -1);
}

// One recorded execution: the request's input (as a request file would hold it) + receipt.
struct Recorded {
  std::string model_path;
  std::string request_json;
  std::string receipt;
};

GenerateRequest from_record(const Recorded& rec) {
  GenerateRequest req;
  EXPECT_TRUE(receipt::request_input_from_json(rec.request_json, req).ok());
  auto r = receipt::parse_json_strict(rec.receipt);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(receipt::request_config_from_json((*r)["config"], req).ok());
  return req;
}

TEST_F(ReceiptTest, TwentyRecordedRequestsReplay) {
  POWER_REQUIRE_SHARED();
  const std::vector<std::string> models = {
      stories_f32(),
      testing::shared_dir() + "/fixtures/models/llama/llama-Q4_0.gguf",
      testing::shared_dir() + "/fixtures/models/qwen2/qwen2-Q8_0.gguf",
  };
  const std::vector<std::string> prompts = {"Once upon a time", "Lily went to the park",
                                            "The cat sat", "One day, a little bird",
                                            "Tom had a big red ball"};
  std::vector<Recorded> recorded;
  // Record: per model, requests submitted together into one runtime (max_running 4), so they
  // share forward passes with each other and with unrecorded background requests.
  for (size_t mi = 0; mi < models.size(); ++mi) {
    auto rt = runtime();
    auto m = rt->load(models[mi], opts(2, 4));
    ASSERT_TRUE(m.ok()) << models[mi] << ": " << m.status().to_string();
    const int n_here = mi == 0 ? 10 : 5;
    std::vector<std::pair<std::string, RequestHandle>> handles;
    std::vector<RequestHandle> background;
    for (int i = 0; i < n_here; ++i) {
      const std::string prompt = prompts[static_cast<size_t>(i) % prompts.size()];
      GenerateRequest req;
      req.prompt = prompt;
      req.max_tokens = 20 + i;
      req.want_receipt = true;
      if (i % 2 == 1) {  // seeded sampling
        req.sampling.temperature = 0.9f;
        req.sampling.top_k = 0;
        req.sampling.top_p = 0.9f;
        req.sampling.seed = 1000 + static_cast<uint64_t>(i) * 7919;
      } else {
        req.sampling.temperature = 0;
      }
      if (i % 3 == 0) {  // something else in the batch while this one runs
        GenerateRequest noise = req;
        noise.want_receipt = false;
        noise.prompt = "Noise " + std::to_string(i) + " " + prompt;
        noise.sampling.temperature = 1.0f;
        noise.sampling.seed = 42;
        noise.max_tokens = 40;
        auto nh = rt->submit(*m, noise);
        ASSERT_TRUE(nh.ok());
        background.push_back(*nh);
      }
      auto h = rt->submit(*m, req);
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      handles.emplace_back(nlohmann::json({{"prompt", prompt}}).dump(), *h);
    }
    for (auto& [request_json, h] : handles) {
      Completion c = h.wait();
      ASSERT_TRUE(c.status.ok()) << c.status.to_string();
      recorded.push_back({models[mi], request_json, c.receipt});
    }
    for (auto& b : background) b.wait();
    EXPECT_GT(m->stats().steps, 0u);
  }
  ASSERT_EQ(recorded.size(), 20u);

  // Replay each alone in a fresh runtime with the receipt's configuration.
  size_t reproduced = 0;
  for (const Recorded& rec : recorded) {
    auto r = receipt::parse_json_strict(rec.receipt);
    ASSERT_TRUE(r.ok());
    auto rt = runtime();
    LoadOptions lo = opts((*r)["config"]["threads"].get<int>(), 1);
    lo.kv_type = (*r)["config"]["kv_type"].get<std::string>();
    lo.n_ctx = (*r)["config"]["n_ctx"].get<int64_t>();
    auto m = rt->load(rec.model_path, lo);
    ASSERT_TRUE(m.ok());
    ASSERT_EQ((*r)["model"]["sha256"], m->info().sha256);
    GenerateRequest req = from_record(rec);
    auto h = rt->submit(*m, req);
    ASSERT_TRUE(h.ok());
    Completion c = h->wait();
    const nlohmann::json out = receipt::output_json(c);
    EXPECT_EQ(out["tokens_sha256"], (*r)["output"]["tokens_sha256"]) << rec.request_json;
    EXPECT_EQ(out["text_sha256"], (*r)["output"]["text_sha256"]) << rec.request_json;
    if (out["tokens_sha256"] == (*r)["output"]["tokens_sha256"]) ++reproduced;
  }
  EXPECT_EQ(reproduced, 20u);

  // The check can fail: another seed for a sampled request gives another digest.
  const Recorded& sampled = recorded[1];
  GenerateRequest req = from_record(sampled);
  ASSERT_GT(req.sampling.temperature, 0.f);
  req.sampling.seed += 1;
  auto rt = runtime();
  auto m = rt->load(sampled.model_path, opts(2, 1));
  ASSERT_TRUE(m.ok());
  auto h = rt->submit(*m, req);
  ASSERT_TRUE(h.ok());
  auto r = receipt::parse_json_strict(sampled.receipt);
  EXPECT_NE(receipt::output_json(h->wait())["tokens_sha256"], (*r)["output"]["tokens_sha256"]);
}

}  // namespace
}  // namespace power
