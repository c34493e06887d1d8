// Embedding Power: load a GGUF model, run two requests concurrently, stream one of them.
//
//   power_embed_example MODEL.gguf [PROMPT]
//
// Exit codes: 0 ok, 1 error, 77 skipped (the model file is absent and CI is not "true"; the
// ctest that runs this program on ../shared's stories260K treats 77 as a skip).
#include <sys/stat.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "power/runtime.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT]\n", argv[0]);
    return 1;
  }
  struct stat st;
  if (::stat(argv[1], &st) != 0) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::strcmp(ci, "true") == 0) {
      std::fprintf(stderr, "CI=true but the model is missing: %s\n", argv[1]);
      return 1;
    }
    std::fprintf(stderr, "model not found at %s; skipping\n", argv[1]);
    return 77;
  }
  auto rt = power::Runtime::create({});
  if (!rt.ok()) {
    std::fprintf(stderr, "%s\n", rt.status().to_string().c_str());
    return 1;
  }
  power::LoadOptions lo;
  lo.n_ctx = 256;
  lo.max_running = 4;
  auto model = (*rt)->load(argv[1], lo);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  std::printf("model %s sha256 %s\n", model->info().arch.c_str(), model->info().sha256.c_str());

  power::GenerateRequest a;
  a.prompt = argc > 2 ? argv[2] : "Once upon a time";
  a.max_tokens = 32;
  a.sampling.temperature = 0;
  a.on_stream = [](const power::StreamEvent& e) {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  power::GenerateRequest b;
  b.messages = {{"user", "Tell me a story."}};
  b.max_tokens = 16;
  b.priority = power::Priority::kLow;

  auto ha = (*rt)->submit(*model, std::move(a));
  auto hb = (*rt)->submit(*model, std::move(b));
  if (!ha.ok() || !hb.ok()) {
    std::fprintf(stderr, "%s\n", (!ha.ok() ? ha.status() : hb.status()).to_string().c_str());
    return 1;
  }
  power::Completion ca = ha->wait();
  power::Completion cb = hb->wait();
  std::printf("\n");
  for (const power::Completion* c : {&ca, &cb}) {
    if (!c->status.ok()) {
      std::fprintf(stderr, "%s\n", c->status.to_string().c_str());
      return 1;
    }
    std::printf("finish %s: %lld prompt + %lld generated tokens, ttft %.1f ms, decode %.1f tok/s\n",
                std::string(power::finish_name(c->finish)).c_str(),
                static_cast<long long>(c->usage.prompt_tokens),
                static_cast<long long>(c->usage.completion_tokens),
                c->timings.time_to_first_token_ms, c->timings.decode_tokens_per_s);
  }
  return ca.tokens.empty() ? 1 : 0;
}
