// embed_load: sentences/s of the embedded embedding API (include/power/embed.h) under 1, 8 and
// 64 concurrent clients, each sending one sentence per request, round robin over a file of
// sentences (one per line). Out of CI; see docs/EMBEDDINGS.md for figures and the method.
//
//   embed_load MODEL.gguf SENTENCES.txt [requests_per_level=512] [threads=0] [window_us=2000]
//
// Prints one line per client count: requests, seconds, sentences/s, forward passes, average
// inputs per pass. bench/embed_load.sh runs the same load against llama-server --embedding.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "power/embed.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: embed_load MODEL.gguf SENTENCES.txt [requests=512] [threads=0] "
                 "[window_us=2000]\n");
    return 2;
  }
  const int requests = argc > 3 ? std::atoi(argv[3]) : 512;
  power::EmbedOptions o;
  o.threads = argc > 4 ? std::atoi(argv[4]) : 0;
  o.batch_window_us = argc > 5 ? std::atoi(argv[5]) : 2000;
  std::vector<std::string> sentences;
  {
    std::ifstream f(argv[2]);
    for (std::string line; std::getline(f, line);) {
      if (!line.empty()) sentences.push_back(line);
    }
  }
  if (sentences.empty()) {
    std::fprintf(stderr, "no sentences in %s\n", argv[2]);
    return 2;
  }
  auto model = power::EmbeddingModel::open(argv[1], o);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  std::printf("model %s, %zu sentences, %d requests per level, threads %d, window %d us\n", argv[1],
              sentences.size(), requests, (*model)->info().threads, o.batch_window_us);
  for (int clients : {1, 8, 64}) {
    const power::EmbedStats before = (*model)->stats();
    std::atomic<int> next{0};
    std::atomic<int> errors{0};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&] {
        for (int i; (i = next.fetch_add(1)) < requests;) {
          power::EmbedRequest r;
          r.texts = {sentences[static_cast<size_t>(i) % sentences.size()]};
          r.normalize = true;
          if (!(*model)->embed(r).ok()) errors.fetch_add(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const power::EmbedStats after = (*model)->stats();
    const auto passes = after.forward_passes - before.forward_passes;
    std::printf(
        "clients %2d: %d requests in %.3f s = %.1f sentences/s, %llu passes (%.1f inputs/pass), "
        "%d errors\n",
        clients, requests, s, requests / s, static_cast<unsigned long long>(passes),
        passes ? double(after.inputs - before.inputs) / double(passes) : 0.0, errors.load());
  }
  return 0;
}
