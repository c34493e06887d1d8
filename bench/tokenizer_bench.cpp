// Tokenizer throughput: tokens/s encoding (and decoding) about 1 MiB of English text.
//
// Text: the stories260K samples and model card (../shared/models/stories260K) plus the peer's
// tokenizer test strings (../shared/fixtures/tokenizer, some non-English), repeated to 1 MiB;
// a built-in paragraph when ../shared is absent. Vocabularies: the fixture GGUFs (SPM
// llama-spm, BPE gpt-2 and deepseek-coder, WPM bert-bge) and stories260K's 512-token SPM.
//
//   tokenizer_bench [--benchmark_filter=...]   ($POWER_SHARED_DIR overrides ../shared)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "text/tokenizer.h"

namespace {

using power::GgufFile;
using power::text::StreamingDetokenizer;
using power::text::TokenId;
using power::text::Tokenizer;

constexpr size_t kTextBytes = size_t{1} << 20;

std::string shared_dir() {
  if (const char* env = std::getenv("POWER_SHARED_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return std::string(POWER_SOURCE_DIR) + "/../shared";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const std::string& corpus() {
  static const std::string text = [] {
    std::string seed;
    for (const char* rel :
         {"/models/stories260K/expected_greedy_t0_n256.txt",
          "/models/stories260K/expected_t1.0_p0.9_s133742_n256.txt",
          "/models/stories260K/stories260K.md", "/fixtures/tokenizer/ggml-vocab-gpt-2.gguf.inp"}) {
      std::string part = read_file(shared_dir() + rel);
      if (!part.empty()) seed += part + "\n\n";
    }
    if (seed.empty()) {
      seed =
          "Once upon a time, there was a little girl named Lily. She loved to play outside in "
          "the park. One day, she saw a big, red ball under a tree. \"Can I play with you?\" "
          "she asked the boy who owned it. He smiled and said yes, and they played all day.\n\n";
    }
    std::string out;
    out.reserve(kTextBytes + seed.size());
    while (out.size() < kTextBytes) out += seed;
    out.resize(kTextBytes);
    // Do not end inside a UTF-8 character.
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
    return out;
  }();
  return text;
}

std::unique_ptr<Tokenizer> load(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return nullptr;
  auto tok = Tokenizer::from_gguf(**file);
  return tok.ok() ? std::move(tok).value() : nullptr;
}

std::string vocab_path(const std::string& name) {
  if (name == "stories260K") return shared_dir() + "/models/stories260K/stories260K-F32.gguf";
  return shared_dir() + "/fixtures/tokenizer/ggml-vocab-" + name + ".gguf";
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  auto tok = load(vocab_path(name));
  if (tok == nullptr) {
    state.SkipWithError(("cannot load " + vocab_path(name)).c_str());
    return;
  }
  const std::string& text = corpus();
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<TokenId> ids = tok->encode(text, {.add_special = false});
    tokens += ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(text.size() * state.iterations()));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["tokens"] = static_cast<double>(tokens / state.iterations());
}

void BM_DecodeStreaming(benchmark::State& state, const std::string& name) {
  auto tok = load(vocab_path(name));
  if (tok == nullptr) {
    state.SkipWithError(("cannot load " + vocab_path(name)).c_str());
    return;
  }
  const std::vector<TokenId> ids = tok->encode(corpus(), {.add_special = false});
  for (auto _ : state) {
    StreamingDetokenizer stream(*tok);
    std::string out;
    out.reserve(corpus().size() + 16);
    for (TokenId id : ids) (void)stream.push(id, out);
    stream.finish(out);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(ids.size() * state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Encode, spm_llama, std::string("llama-spm"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, spm_stories260K, std::string("stories260K"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_gpt2, std::string("gpt-2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_deepseek_coder, std::string("deepseek-coder"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, wpm_bert_bge, std::string("bert-bge"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeStreaming, spm_llama, std::string("llama-spm"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeStreaming, bpe_gpt2, std::string("gpt-2"))
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
