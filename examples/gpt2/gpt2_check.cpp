// gpt2_check: the GPT-2 package (gpt2.h), registered in process, against the peer's fixtures.
//
//   gpt2_check FIXTURE_DIR [--gelu f16|exact] [--precision default|exact]
//
// FIXTURE_DIR is ../shared/fixtures/models/gpt2 (fixtures README section 2b). For each of
// gpt2-F32, gpt2-Q8_0 and gpt2-Q4_K_M: load through power::Runtime (F32 KV cache, as the
// peer's reference run), take every position's logits of the 48 ids of tokens.txt with
// Runtime::logits and compare them with the peer's (<file>.logits.f32) and with exact float64
// arithmetic on the same stored weights (<file>.logits-exact.f32):
//   F32:       max |ours - peer| <= 1e-3 and the same argmax as the peer at all 48 positions;
//   quantized: max |ours - exact| <= 1.25 * max |peer - exact| + 2e-3 (no further from exact
//              arithmetic than the peer is, up to a margin);
// then generate greedily (temperature 0, ignore_eos, 32 tokens) after the first 16 ids through
// Runtime::submit: F32 must give exactly the peer's ids (<file>.greedy.txt); a quantized file
// too, except at a near tie (check_greedy below). Every figure is printed.
// --gelu / --precision choose other numerics than the package's defaults (gpt2.h Numerics),
// to reproduce the measurements in gpt2.cpp's header; the bounds are the same.
// Exit codes: 0 all pass, 1 a failure or an error, 77 skipped (FIXTURE_DIR is absent and the
// environment does not say CI=true).
// Uses only Power's public headers.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "gpt2.h"
#include "power/runtime.h"
#include "power/sdk.h"

namespace {

constexpr size_t kPromptTokens = 16;
constexpr int32_t kGreedyTokens = 32;
constexpr double kF32PeerBound = 1e-3;
constexpr double kQuantFactor = 1.25;
constexpr double kQuantSlack = 2e-3;

bool read_ids(const std::string& path, std::vector<int32_t>* ids) {
  std::ifstream in(path);
  if (!in) return false;
  ids->assign(std::istream_iterator<int32_t>(in), std::istream_iterator<int32_t>());
  return !ids->empty();
}

// A raw little-endian float32 file of exactly n values.
bool read_f32(const std::string& path, size_t n, std::vector<float>* out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || static_cast<size_t>(in.tellg()) != n * sizeof(float)) return false;
  in.seekg(0);
  out->resize(n);
  return static_cast<bool>(in.read(reinterpret_cast<char*>(out->data()),
                                   static_cast<std::streamsize>(n * sizeof(float))));
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return m;
}

// Argmax of each row (ties: the lowest id, as the peer's greedy).
std::vector<size_t> argmax_rows(const std::vector<float>& logits, size_t n_vocab) {
  std::vector<size_t> best;
  for (size_t r = 0; r * n_vocab < logits.size(); ++r) {
    const float* row = logits.data() + r * n_vocab;
    size_t b = 0;
    for (size_t i = 1; i < n_vocab; ++i) {
      if (row[i] > row[b]) b = i;
    }
    best.push_back(b);
  }
  return best;
}

size_t count_equal(const std::vector<size_t>& a, const std::vector<size_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] == b[i] ? 1 : 0;
  return n;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
  return s.str();
}

// Greedy generation after the first 16 ids against the peer's 32 ids.
// F32 (tie_tolerance 0) must give exactly the peer's ids. A quantized file may part from them
// only at a near tie: a step where, with the peer's ids as context (teacher forced, one
// Runtime::logits pass), our logit of the peer's token is within tie_tolerance of our top-1,
// tie_tolerance being the file's logits bound (1.25 x max|peer - exact| + 2e-3). Both
// implementations quantize activations; one input of a quantizer that lands on the other side
// of a rounding boundary moves logits by ~1e-2 (measured against the peer on these files, and
// between Power's own packed and unpacked kernels), so a decision closer than what the logits
// check tolerates is made by rounding, not by the model. Every other step's argmax must still
// be the peer's id, and the generation must part from the peer's ids (if at all) at such a step.
bool check_greedy(power::Runtime& rt, const power::ModelHandle& model,
                  const std::vector<int32_t>& tokens, const std::vector<int32_t>& expected,
                  double tie_tolerance) {
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + kPromptTokens);
  power::GenerateRequest req;
  req.prompt_tokens = prompt;
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  req.max_tokens = kGreedyTokens;
  auto handle = rt.submit(model, std::move(req));
  if (!handle.ok()) {
    std::printf("  greedy: submit failed: %s\n", handle.status().to_string().c_str());
    return false;
  }
  const power::Completion c = handle->wait();
  if (!c.status.ok()) {
    std::printf("  greedy: %s\n", c.status.to_string().c_str());
    return false;
  }
  size_t same = 0, prefix = 0;
  for (size_t i = 0; i < c.tokens.size() && i < expected.size(); ++i) {
    same += c.tokens[i] == expected[i] ? 1 : 0;
    if (prefix == i && c.tokens[i] == expected[i]) ++prefix;
  }
  const bool equal = c.tokens == expected;
  std::printf("  greedy: %zu/%zu ids equal the peer's, first %zu in a row (%zu generated)%s\n",
              same, expected.size(), prefix, c.tokens.size(), equal ? "" : ":");
  if (!equal) {
    std::printf("    ours: %s\n    peer: %s\n", ids_text(c.tokens).c_str(),
                ids_text(expected).c_str());
  }
  if (equal || tie_tolerance <= 0.0) {
    std::printf("  greedy: %s\n", equal ? "PASS" : "FAIL (must equal the peer's ids)");
    return equal;
  }
  // Teacher forced: the prompt and the peer's ids but the last; row 15 + s decides step s.
  std::vector<int32_t> forced = prompt;
  forced.insert(forced.end(), expected.begin(), expected.end() - 1);
  auto logits = rt.logits(model, forced);
  const auto n_vocab = static_cast<size_t>(model.info().n_vocab);
  if (!logits.ok() || logits->size() != forced.size() * n_vocab) {
    std::printf("  greedy: teacher-forced logits failed: %s\n",
                logits.status().to_string().c_str());
    return false;
  }
  const std::vector<size_t> top = argmax_rows(*logits, n_vocab);
  bool ties_only = true;
  size_t agree = 0;
  for (size_t s = 0; s < expected.size(); ++s) {
    const size_t row = kPromptTokens - 1 + s;
    const auto want = static_cast<size_t>(expected[s]);
    if (top[row] == want) {
      ++agree;
      continue;
    }
    const float* r = logits->data() + row * n_vocab;
    const double gap = static_cast<double>(r[top[row]]) - r[want];
    std::printf("    step %zu: ours %zu, peer %zu, our logit gap %.4f (tolerance %.4f): %s\n", s,
                top[row], want, gap, tie_tolerance,
                gap <= tie_tolerance ? "near tie" : "NOT a near tie");
    ties_only = ties_only && gap <= tie_tolerance;
  }
  // The generation may part from the peer's ids only where our own logits part from them too.
  const bool parted_at_tie =
      top[kPromptTokens - 1 + prefix] != static_cast<size_t>(expected[prefix]);
  const bool pass = ties_only && parted_at_tie;
  if (!parted_at_tie) {
    std::printf(
        "    generation parted at step %zu, where the teacher-forced argmax is the peer's\n",
        prefix);
  }
  std::printf("  greedy: teacher forced %zu/%zu argmax = peer, the rest near ties: %s\n", agree,
              expected.size(), pass ? "PASS" : "FAIL");
  return pass;
}

// One fixture file; false when a check failed or something could not run.
bool check_file(power::Runtime& rt, const std::string& dir, const std::string& variant,
                const std::vector<int32_t>& tokens) {
  const std::string base = dir + "/gpt2-" + variant;
  std::printf("== gpt2-%s\n", variant.c_str());
  power::LoadOptions lo;
  lo.n_ctx = 256;
  lo.kv_type = "f32";
  lo.threads = 2;
  auto model = rt.load(base + ".gguf", lo);
  if (!model.ok()) {
    std::printf("  load failed: %s\n", model.status().to_string().c_str());
    return false;
  }
  const size_t n_vocab = static_cast<size_t>(model->info().n_vocab);
  std::printf("  arch %s, n_vocab %zu, n_layer %lld, n_ctx %lld\n", model->info().arch.c_str(),
              n_vocab, static_cast<long long>(model->info().n_layer),
              static_cast<long long>(model->info().n_ctx));
  bool ok = true;
  double tie_tolerance = 0.0;  // F32, or the logits could not be compared: strict greedy

  auto ours = rt.logits(*model, tokens);
  std::vector<float> peer, exact;
  const size_t n = tokens.size() * n_vocab;
  if (!ours.ok()) {
    std::printf("  logits failed: %s\n", ours.status().to_string().c_str());
    ok = false;
  } else if (ours->size() != n || !read_f32(base + ".logits.f32", n, &peer) ||
             !read_f32(base + ".logits-exact.f32", n, &exact)) {
    std::printf("  logits: expected %zu values and the peer's .logits.f32/.logits-exact.f32\n", n);
    ok = false;
  } else {
    const double ours_peer = max_abs_diff(*ours, peer);
    const double ours_exact = max_abs_diff(*ours, exact);
    const double peer_exact = max_abs_diff(peer, exact);
    const auto top_ours = argmax_rows(*ours, n_vocab);
    const size_t top_peer = count_equal(top_ours, argmax_rows(peer, n_vocab));
    const size_t top_exact = count_equal(top_ours, argmax_rows(exact, n_vocab));
    std::printf("  max|ours-peer| %.3e  max|ours-exact| %.3e  max|peer-exact| %.3e\n", ours_peer,
                ours_exact, peer_exact);
    std::printf("  top-1 = peer %zu/%zu, = exact %zu/%zu\n", top_peer, tokens.size(), top_exact,
                tokens.size());
    if (variant == "F32") {
      const bool pass = ours_peer <= kF32PeerBound && top_peer == tokens.size();
      std::printf("  logits: max|ours-peer| %.3e <= %.1e and top-1 %zu/%zu: %s\n", ours_peer,
                  kF32PeerBound, top_peer, tokens.size(), pass ? "PASS" : "FAIL");
      ok = ok && pass;
    } else {
      const double bound = kQuantFactor * peer_exact + kQuantSlack;
      tie_tolerance = bound;
      const bool pass = ours_exact <= bound;
      std::printf("  logits: max|ours-exact| %.3e <= bound %.3e (1.25 x %.3e + 2e-3): %s\n",
                  ours_exact, bound, peer_exact, pass ? "PASS" : "FAIL");
      ok = ok && pass;
    }
  }

  std::vector<int32_t> expected;
  if (!read_ids(base + ".greedy.txt", &expected) || expected.size() != kGreedyTokens) {
    std::printf("  greedy: cannot read %d ids from %s.greedy.txt\n", kGreedyTokens, base.c_str());
    return false;
  }
  ok = check_greedy(rt, *model, tokens, expected, tie_tolerance) && ok;
  if (power::Status s = rt.unload(*model); !s.ok()) {
    std::printf("  unload failed: %s\n", s.to_string().c_str());
    return false;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FIXTURE_DIR [--gelu f16|exact] [--precision default|exact]\n",
                 argv[0]);
    return 1;
  }
  const std::string dir = argv[1];
  gpt2::Numerics numerics;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (flag == "--gelu" && (value == "f16" || value == "exact")) {
      numerics.gelu =
          value == "f16" ? power::sdk::Activation::kGeluTanhF16 : power::sdk::Activation::kGeluTanh;
    } else if (flag == "--precision" && (value == "default" || value == "exact")) {
      numerics.precision =
          value == "default" ? power::sdk::Precision::kDefault : power::sdk::Precision::kExact;
    } else {
      std::fprintf(stderr, "unknown argument: %s %s\n", flag.c_str(), value.c_str());
      return 1;
    }
    ++i;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::strcmp(ci, "true") == 0) {
      std::fprintf(stderr, "CI=true but the gpt2 fixtures are missing: %s\n", dir.c_str());
      return 1;
    }
    std::fprintf(stderr, "gpt2 fixtures not found at %s; skipping\n", dir.c_str());
    return 77;
  }
  std::vector<int32_t> tokens;
  if (!read_ids(dir + "/tokens.txt", &tokens) || tokens.size() < kPromptTokens) {
    std::fprintf(stderr, "cannot read the ids of %s/tokens.txt\n", dir.c_str());
    return 1;
  }
  if (power::Status s = power::sdk::register_architecture(gpt2::architecture(numerics)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }
  auto rt = power::Runtime::create({});
  if (!rt.ok()) {
    std::fprintf(stderr, "%s\n", rt.status().to_string().c_str());
    return 1;
  }
  std::printf("gelu %s, precision %s, %zu tokens\n",
              numerics.gelu == power::sdk::Activation::kGeluTanhF16 ? "f16-table" : "exact",
              numerics.precision == power::sdk::Precision::kDefault ? "default" : "exact",
              tokens.size());
  bool all = true;
  for (const char* variant : {"F32", "Q8_0", "Q4_K_M"}) {
    all = check_file(**rt, dir, variant, tokens) && all;
  }
  std::printf("%s\n", all ? "gpt2_check: PASS" : "gpt2_check: FAIL");
  return all ? 0 : 1;
}
