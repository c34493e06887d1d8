#include "validate/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "validate/stats.h"

namespace power::validate {
namespace {

constexpr char kMagic[8] = {'P', 'O', 'W', 'E', 'R', 'K', 'L', 'D'};
constexpr uint32_t kVersion = 1;

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

// Log-softmax of one row: max in float as the logits are, the normalizer in double.
void log_softmax(const float* logits, int64_t n, std::vector<double>* out) {
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const double log_sum = std::log(sum);
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<double>(logits[i] - mx) - log_sum;
}

int64_t argmax(const double* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

int64_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

// Mean and standard error of the mean (sample standard deviation / sqrt(n)).
void mean_err(const std::vector<double>& v, double* mean, double* err) {
  const double n = static_cast<double>(v.size());
  double s = 0, s2 = 0;
  for (double x : v) {
    s += x;
    s2 += x * x;
  }
  *mean = n > 0 ? s / n : 0;
  const double var = n > 1 ? (s2 / n - *mean * *mean) * n / (n - 1) : 0;
  *err = var > 0 ? std::sqrt(var / n) : 0;
}

}  // namespace

Status write_base_logits(const std::string& path, const BaseLogits& base) {
  FilePtr f(std::fopen(path.c_str(), "wb"));
  if (!f) {
    return Status(StatusCode::kIo, "cannot write the base logits file").with("path", path);
  }
  const int32_t header[5] = {static_cast<int32_t>(kVersion), base.n_ctx, base.n_vocab, base.n_chunk,
                             static_cast<int32_t>(base.tokens.size())};
  bool ok = std::fwrite(kMagic, 1, sizeof(kMagic), f.get()) == sizeof(kMagic) &&
            std::fwrite(header, sizeof(int32_t), 5, f.get()) == 5 &&
            std::fwrite(base.tokens.data(), sizeof(int32_t), base.tokens.size(), f.get()) ==
                base.tokens.size() &&
            std::fwrite(base.log_probs.data(), sizeof(float), base.log_probs.size(), f.get()) ==
                base.log_probs.size();
  ok = std::fclose(f.release()) == 0 && ok;
  if (!ok) return Status(StatusCode::kIo, "writing the base logits file failed").with("path", path);
  return Status();
}

Result<BaseLogits> read_base_logits(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f)
    return Status(StatusCode::kNotFound, "cannot open the base logits file").with("path", path);
  auto corrupt = [&](const char* why) {
    return Status(StatusCode::kCorrupt, fmt::format("not a base logits file: {}", why))
        .with("path", path);
  };
  char magic[8];
  int32_t header[5];
  if (std::fread(magic, 1, 8, f.get()) != 8 || std::memcmp(magic, kMagic, 8) != 0) {
    return corrupt("bad magic (expected POWERKLD; llama-perplexity's files are another format)");
  }
  if (std::fread(header, sizeof(int32_t), 5, f.get()) != 5) return corrupt("truncated header");
  if (header[0] != static_cast<int32_t>(kVersion)) return corrupt("unknown version");
  BaseLogits b;
  b.n_ctx = header[1];
  b.n_vocab = header[2];
  b.n_chunk = header[3];
  const int32_t n_tokens = header[4];
  if (b.n_ctx < 2 || b.n_vocab < 1 || b.n_chunk < 1 || n_tokens < 0 ||
      static_cast<int64_t>(b.n_chunk) * b.n_ctx > n_tokens) {
    return corrupt("header values out of range");
  }
  const int64_t rows = static_cast<int64_t>(b.n_chunk) * (b.n_ctx - 1 - b.n_ctx / 2);
  const uint64_t want = 8 + 20 + 4ULL * static_cast<uint64_t>(n_tokens) +
                        4ULL * static_cast<uint64_t>(rows) * static_cast<uint64_t>(b.n_vocab);
  if (std::fseek(f.get(), 0, SEEK_END) != 0) return corrupt("cannot seek");
  const long size = std::ftell(f.get());
  if (size < 0 || static_cast<uint64_t>(size) != want) {
    return corrupt("size does not match its header");
  }
  std::fseek(f.get(), 28, SEEK_SET);
  b.tokens.resize(static_cast<size_t>(n_tokens));
  b.log_probs.resize(static_cast<size_t>(rows * b.n_vocab));
  if (std::fread(b.tokens.data(), sizeof(int32_t), b.tokens.size(), f.get()) != b.tokens.size() ||
      std::fread(b.log_probs.data(), sizeof(float), b.log_probs.size(), f.get()) !=
          b.log_probs.size()) {
    return corrupt("truncated");
  }
  return b;
}

Result<PerplexityResult> perplexity(Runtime& rt, const ModelHandle& model, const std::string& text,
                                    const PerplexityOptions& options, const BaseLogits* base,
                                    BaseLogits* save) {
  const int32_t n_ctx = options.n_ctx;
  if (n_ctx < 4) return Status(StatusCode::kInvalidArgument, "--ctx must be at least 4");
  // As llama-perplexity reads -f: one trailing newline is not part of the text.
  std::string_view body = text;
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  const std::vector<int32_t> tokens = model.tokenize(body, /*add_bos=*/true);
  const std::vector<int32_t> bos_only = model.tokenize("", true);
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < 2 * static_cast<int64_t>(n_ctx)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("the text has {} tokens; perplexity with a context of {} needs at "
                              "least {} (two chunks)",
                              n_tokens, n_ctx, 2 * static_cast<int64_t>(n_ctx)));
  }
  int32_t n_chunk = static_cast<int32_t>(n_tokens / n_ctx);
  if (options.max_chunks > 0) n_chunk = std::min(n_chunk, options.max_chunks);
  const int64_t n_vocab = model.info().n_vocab;
  const int32_t first = n_ctx / 2;
  const int64_t per_chunk = n_ctx - 1 - first;
  if (base) {
    if (base->n_ctx != n_ctx || base->n_vocab != n_vocab || base->n_chunk != n_chunk ||
        base->tokens != tokens) {
      return Status(StatusCode::kInvalidArgument,
                    "the base logits were saved for another text, context, chunk count or "
                    "vocabulary")
          .with("base_ctx", base->n_ctx)
          .with("ctx", n_ctx)
          .with("base_chunks", base->n_chunk)
          .with("chunks", n_chunk)
          .with("base_vocab", base->n_vocab)
          .with("vocab", n_vocab);
    }
  }
  if (save) {
    save->n_ctx = n_ctx;
    save->n_vocab = static_cast<int32_t>(n_vocab);
    save->n_chunk = n_chunk;
    save->tokens = tokens;
    save->log_probs.clear();
    save->log_probs.reserve(static_cast<size_t>(n_chunk * per_chunk * n_vocab));
  }

  PerplexityResult r;
  r.n_ctx = n_ctx;
  r.n_tokens = n_tokens;
  r.n_chunk = n_chunk;
  double nll = 0, nll2 = 0;
  std::vector<double> kld, ln_ratio, dp;
  int64_t same_top = 0;
  double base_nll = 0;
  std::vector<double> lp;
  for (int32_t c = 0; c < n_chunk; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + static_cast<int64_t>(c) * n_ctx,
                               tokens.begin() + static_cast<int64_t>(c + 1) * n_ctx);
    if (!bos_only.empty()) chunk[0] = bos_only[0];
    POWER_ASSIGN_OR_RETURN(std::vector<float> logits, rt.logits(model, chunk));
    for (int32_t j = first; j < n_ctx - 1; ++j) {
      const float* row = logits.data() + static_cast<int64_t>(j) * n_vocab;
      log_softmax(row, n_vocab, &lp);
      const int32_t next = chunk[static_cast<size_t>(j + 1)];
      const double v = -lp[static_cast<size_t>(next)];
      nll += v;
      nll2 += v * v;
      if (save) {
        for (double x : lp) save->log_probs.push_back(static_cast<float>(x));
      }
      if (base) {
        const int64_t row_index = static_cast<int64_t>(c) * per_chunk + (j - first);
        const float* b = base->log_probs.data() + row_index * n_vocab;
        double k = 0;
        for (int64_t i = 0; i < n_vocab; ++i) {
          const double pb = std::exp(static_cast<double>(b[i]));
          k += pb * (static_cast<double>(b[i]) - lp[static_cast<size_t>(i)]);
        }
        kld.push_back(k);
        if (argmax(lp.data(), n_vocab) == argmax(b, n_vocab)) ++same_top;
        const double base_lp = static_cast<double>(b[next]);
        base_nll += -base_lp;
        ln_ratio.push_back(base_lp - lp[static_cast<size_t>(next)]);
        dp.push_back(100.0 * (std::exp(lp[static_cast<size_t>(next)]) - std::exp(base_lp)));
      }
    }
    r.scored += per_chunk;
    r.running.push_back(std::exp(nll / static_cast<double>(r.scored)));
    if (options.on_chunk) options.on_chunk(c, r.running.back());
  }
  const double n = static_cast<double>(r.scored);
  const double mean = nll / n;
  r.ppl = std::exp(mean);
  const double var = nll2 / n - mean * mean;
  r.ppl_err = var > 0 && r.scored > 1 ? std::sqrt(var / (n - 1)) * r.ppl : 0;
  if (base) {
    KldStats s;
    s.count = r.scored;
    mean_err(kld, &s.mean, &s.mean_err);
    s.max = *std::max_element(kld.begin(), kld.end());
    s.min = *std::min_element(kld.begin(), kld.end());
    s.p99_9 = percentile(kld, 99.9);
    s.p99 = percentile(kld, 99);
    s.p95 = percentile(kld, 95);
    s.p90 = percentile(kld, 90);
    s.median = percentile(kld, 50);
    s.p10 = percentile(kld, 10);
    s.p5 = percentile(kld, 5);
    s.p1 = percentile(kld, 1);
    s.p0_1 = percentile(kld, 0.1);
    const double p = static_cast<double>(same_top) / n;
    s.same_top_p = 100.0 * p;
    s.same_top_p_err = r.scored > 1 ? 100.0 * std::sqrt(p * (1 - p) / (n - 1)) : 0;
    s.ppl_base = std::exp(base_nll / n);
    mean_err(ln_ratio, &s.mean_ln_ppl_ratio, &s.mean_ln_ppl_ratio_err);
    double dp2 = 0;
    for (double x : dp) dp2 += x * x;
    s.rms_dp = std::sqrt(dp2 / n);
    s.max_dp = *std::max_element(dp.begin(), dp.end());
    s.min_dp = *std::min_element(dp.begin(), dp.end());
    s.median_dp = percentile(dp, 50);
    r.kld = s;
  }
  return r;
}

}  // namespace power::validate
