// A model served from an encrypted container (../shared stories260K) against the plain file:
// the same identity (ModelInfo::sha256 = the plain file's SHA-256) and receipt model facts,
// bit-identical greedy completions and logits; no plaintext reaches a file (the process's
// open files and mappings, the temp dir); the key is wiped by the time load() returns and the
// weights when the model goes; missing and wrong keys are refused with a clear error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/sha256.h"
#include "power/runtime.h"
#include "receipt/canonical_json.h"
#include "secure/container.h"
#include "secure_test_util.h"
#include "test_util.h"

namespace power {
namespace {

std::string stories_f32() {
  return testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
}

LoadOptions opts() {
  LoadOptions o;
  o.n_ctx = 128;
  o.threads = 2;
  o.max_running = 2;
  return o;
}

GenerateRequest greedy(const std::string& prompt) {
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = 40;
  r.sampling.temperature = 0;
  r.top_logprobs = 3;
  r.want_receipt = true;
  return r;
}

class EncryptedModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("power-encmodel");
    // The same file name as the plain model, so that receipts (which name the model by its
    // general.name or file name) can be compared whole.
    ASSERT_TRUE(std::filesystem::create_directory(dir_ + "/enc"));
    container_ = dir_ + "/enc/stories260K-F32.gguf";
    key_file_ = dir_ + "/model.key";
  }
  void TearDown() override { testing::remove_tree(dir_); }

  void encrypt(uint64_t chunk_bytes) {
    const secure::ModelKey key = testing::write_hex_key_file(key_file_);
    auto info = secure::encrypt_file(stories_f32(), container_, key, chunk_bytes);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
  }
  std::unique_ptr<Runtime> runtime() {
    RuntimeOptions ro;
    ro.keys_dir = dir_ + "/keys";
    ro.tensor_manifest_dir = dir_ + "/tensors";
    auto rt = Runtime::create(ro);
    EXPECT_TRUE(rt.ok());
    return std::move(*rt);
  }
  std::string dir_, container_, key_file_;
};

Completion run(Runtime& rt, const ModelHandle& m, const std::string& prompt) {
  auto h = rt.submit(m, greedy(prompt));
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  return h.ok() ? h->wait() : Completion{};
}

TEST_F(EncryptedModelTest, SameOutputsIdentityAndReceiptsAsThePlainFile) {
  POWER_REQUIRE_SHARED();
  encrypt(64 * 1024);  // many chunks
  auto rt = runtime();
  auto plain = rt->load(stories_f32(), opts());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  LoadOptions eo = opts();
  eo.model_key_file = key_file_;
  auto enc = rt->load(container_, eo);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();

  auto file_digest = sha256_file(stories_f32());
  ASSERT_TRUE(file_digest.ok());
  EXPECT_EQ(enc->info().sha256, to_hex(*file_digest));
  EXPECT_EQ(enc->info().sha256, plain->info().sha256);
  EXPECT_EQ(enc->info().weights_bytes, plain->info().weights_bytes);
  EXPECT_EQ(enc->info().path, container_);
  // The plaintext's tensor digests are not cached on disk (they would say which model the
  // container holds); the plain file's are, at its first receipt.
  ASSERT_TRUE(run(*rt, *enc, "Once upon a time").status.ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/tensors"));
  ASSERT_TRUE(run(*rt, *plain, "Once upon a time").status.ok());
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/tensors/sha256-" + to_hex(*file_digest) + ".json"));

  for (const std::string prompt : {"Once upon a time", "Lily went to the park"}) {
    const Completion a = run(*rt, *plain, prompt);
    const Completion b = run(*rt, *enc, prompt);
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    ASSERT_FALSE(a.tokens.empty());
    testing::expect_identical_completions(b, a);
    // Receipts: the same model facts (plaintext digest, tensor digests) and outputs.
    auto ra = receipt::parse_json_strict(a.receipt);
    auto rb = receipt::parse_json_strict(b.receipt);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ((*rb)["model"], (*ra)["model"]);
    EXPECT_EQ((*rb)["model"]["sha256"], to_hex(*file_digest));
    EXPECT_EQ((*rb)["output"], (*ra)["output"]);
  }
  const std::vector<int32_t> ids = plain->tokenize("Once upon a time, there was", true);
  auto la = rt->logits(*plain, ids);
  auto lb = rt->logits(*enc, ids);
  ASSERT_TRUE(la.ok() && lb.ok());
  ASSERT_EQ(la->size(), lb->size());
  EXPECT_EQ(std::memcmp(la->data(), lb->data(), la->size() * sizeof(float)), 0);
}

// The container on disk is ciphertext: a weights budget below the model's size is refused
// (nothing may be streamed from that file), auto keeps everything resident (the plaintext is in
// locked memory already) and no mirror is built.
TEST_F(EncryptedModelTest, AWeightsBudgetNeverStreamsFromTheContainer) {
  POWER_REQUIRE_SHARED();
  encrypt(64 * 1024);
  auto rt = runtime();
  LoadOptions eo = opts();
  eo.model_key_file = key_file_;
  eo.weights_budget = "0%";
  auto refused = rt->load(container_, eo);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().to_string().find("encrypted"), std::string::npos);
  eo.weights_budget = "auto";
  eo.mirror_dir = dir_ + "/mirror";
  auto enc = rt->load(container_, eo);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  EXPECT_EQ(enc->info().weights_streamed_bytes, 0u);
  EXPECT_TRUE(enc->info().weights_mirror_dir.empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/mirror"));
  auto plain = rt->load(stories_f32(), opts());
  ASSERT_TRUE(plain.ok());
  const Completion a = run(*rt, *plain, "Once upon a time");
  const Completion b = run(*rt, *enc, "Once upon a time");
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(b.tokens, a.tokens);
}

TEST_F(EncryptedModelTest, NoPlaintextReachesAFileAndSecretsAreWiped) {
  POWER_REQUIRE_SHARED();
  encrypt(secure::kChunkBytesDefault);
  // The load runs with TMPDIR pointing at an empty directory of this test's own, so that
  // "no file appeared" is about this process (the system temp dir is shared with concurrently
  // running tests, which create files there).
  const std::string private_tmp = dir_ + "/tmp";
  std::filesystem::create_directories(private_tmp);
  const char* old_tmp = std::getenv("TMPDIR");
  const std::string saved_tmp = old_tmp ? old_tmp : "";
  setenv("TMPDIR", private_tmp.c_str(), 1);
  const uint64_t plain_bytes = std::filesystem::file_size(stories_f32());
  auto rt = runtime();
  testing::WipeWatcher watcher;
  {
    LoadOptions eo = opts();
    eo.model_key_file = key_file_;
    auto enc = rt->load(container_, eo);
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    // The key, its file's text and the derived file key are gone once load() returns.
    EXPECT_EQ(watcher.allocations("model key"), 1);
    EXPECT_EQ(watcher.wipes_of("model key"), 1);
    EXPECT_EQ(watcher.wipes_of("model key file text"), 1);
    EXPECT_EQ(watcher.allocations("file key"), watcher.wipes_of("file key"));
    EXPECT_GE(watcher.wipes_of("file key"), 1);
    EXPECT_EQ(watcher.wipes_of("weights"), 0);
    EXPECT_TRUE(watcher.all_wipes_zero());

    // Neither the container nor anything in a temp dir is open or mapped: the weights are in
    // anonymous memory, and no file appeared in the temp dir.
    for (const std::string& p : testing::open_file_targets()) {
      EXPECT_NE(p, container_);
      EXPECT_EQ(p.find("(deleted)"), std::string::npos) << p;
      EXPECT_EQ(p.find("memfd:"), std::string::npos) << p;
    }
    for (const std::string& p : testing::mapped_paths()) {
      EXPECT_NE(p, container_);
      EXPECT_NE(p, stories_f32());
      EXPECT_EQ(p.find("(deleted)"), std::string::npos) << p;
    }
    EXPECT_EQ(testing::files_under(private_tmp), std::set<std::string>{})
        << "a file appeared in TMPDIR";
    if (saved_tmp.empty()) {
      unsetenv("TMPDIR");
    } else {
      setenv("TMPDIR", saved_tmp.c_str(), 1);
    }
    for (const std::string& f : testing::files_under(dir_)) {
      EXPECT_TRUE(f == container_ || f == key_file_ || f.rfind(dir_ + "/keys/", 0) == 0)
          << "unexpected file " << f;
    }
    auto c = run(*rt, *enc, "Once upon a time");
    ASSERT_TRUE(c.status.ok());
    ASSERT_TRUE(rt->unload(*enc).ok());
  }
  // The last handle went with the scope: the decrypted weights were wiped (all of them).
  EXPECT_EQ(watcher.wipes_of("weights"), 1);
  bool full = false;
  for (const auto& w : watcher.wipes())
    full |= w.purpose == "weights" && w.size_bytes == plain_bytes;
  EXPECT_TRUE(full);
  EXPECT_TRUE(watcher.all_wipes_zero());
}

TEST_F(EncryptedModelTest, DecryptedWeightsAreNotDumpable) {
  POWER_REQUIRE_SHARED();
  encrypt(secure::kChunkBytesDefault);
  auto rt = runtime();
  LoadOptions eo = opts();
  eo.model_key_file = key_file_;
  auto enc = rt->load(container_, eo);
  ASSERT_TRUE(enc.ok()) << enc.status().to_string();
  // The weights' region is the one anonymous DONTDUMP mapping at least the file's size (the
  // runtime does not expose its address; nothing else in the process asks for DONTDUMP).
  const uint64_t plain_bytes = std::filesystem::file_size(stories_f32());
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  uint64_t lo = 0, hi = 0, found = 0;
  bool anonymous = false;
  while (std::getline(smaps, line)) {
    uint64_t a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      lo = a;
      hi = b;
      anonymous = line.find('/') == std::string::npos;
      continue;
    }
    if (line.rfind("VmFlags:", 0) == 0 && anonymous && hi - lo >= plain_bytes &&
        testing::has_vm_flag(line.substr(8), "dd")) {
      ++found;
      EXPECT_FALSE(testing::has_vm_flag(line.substr(8), "wr")) << line;
    }
  }
  EXPECT_EQ(found, 1u);
}

TEST_F(EncryptedModelTest, MissingOrWrongKeyIsAClearError) {
  POWER_REQUIRE_SHARED();
  encrypt(secure::kChunkBytesDefault);
  const testing::ScopedEnv env(secure::kModelKeyEnv);
  env.unset();
  auto rt = runtime();
  auto none = rt->load(container_, opts());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("encrypted Power container"), std::string::npos);
  EXPECT_NE(none.status().message().find("--model-key-file"), std::string::npos);

  LoadOptions wrong = opts();
  wrong.model_key_file = dir_ + "/other.key";
  (void)testing::write_hex_key_file(wrong.model_key_file);
  auto w = rt->load(container_, wrong);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("wrong model key"), std::string::npos)
      << w.status().to_string();

  // The key from the environment works; a key given two ways is refused.
  auto hex = read_file_text(key_file_);
  ASSERT_TRUE(hex.ok());
  const std::string digits = hex->substr(0, 64);
  env.set(digits.c_str());
  auto from_env = rt->load(container_, opts());
  ASSERT_TRUE(from_env.ok()) << from_env.status().to_string();
  env.unset();
  LoadOptions both = opts();
  both.model_key_file = key_file_;
  both.model_key_hex = digits;
  EXPECT_FALSE(rt->load(container_, both).ok());
  LoadOptions hex_only = opts();
  hex_only.model_key_hex = digits;
  EXPECT_TRUE(rt->load(container_, hex_only).ok());
  // A key does not stop a plain file from loading.
  LoadOptions plain_with_key = opts();
  plain_with_key.model_key_file = key_file_;
  EXPECT_TRUE(rt->load(stories_f32(), plain_with_key).ok());
}

}  // namespace
}  // namespace power
