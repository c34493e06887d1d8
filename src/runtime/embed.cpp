// EmbeddingModel: an encoder package (bert, or a registered one) behind a microbatching worker (see
// include/power/embed.h).
//
// Callers tokenize and validate in their own thread, then queue a Job and wait. One worker
// thread owns the encoder workspace: it waits for the first job, keeps the batch open for
// batch_window_us from that job's arrival (or until the queued tokens fill a pass), takes whole
// inputs in arrival order up to max_batch_tokens, runs one encoder pass over all of them,
// copies each input's rows to its job and wakes the callers whose inputs are all done.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "format/gguf.h"
#include "host/model.h"
#include "host/pooling.h"
#include "host/registry.h"
#include "host/text.h"
#include "power/embed.h"
#include "power/runtime.h"
#include "runtime/model_file.h"
#include "secure/container.h"
#include "text/tokenizer.h"

namespace power {

namespace {

// The key fields of EmbedOptions as the model-file opener takes them.
LoadOptions key_source(const EmbedOptions& o) {
  LoadOptions lo;
  lo.model_key_file = o.model_key_file;
  lo.model_key_hex = o.model_key_hex;
  lo.require_mlock = o.require_mlock;
  return lo;
}

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

struct Job {
  std::vector<std::vector<int32_t>> inputs;
  bool normalize = false;
  Clock::time_point arrival;
  std::vector<std::vector<float>> out;
  size_t next = 0;  // next input to schedule
  size_t done = 0;  // inputs with results
  bool shared_pass = false;
  bool finished = false;
  Status status;
};

}  // namespace

class EmbeddingModelImpl {
 public:
  ~EmbeddingModelImpl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  Status init(const std::string& path, const EmbedOptions& o) {
    if (o.max_batch_tokens <= 0 || o.batch_window_us < 0 || o.max_waiting < 0 || o.n_ctx < 0 ||
        o.threads < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "need max_batch_tokens > 0 and batch_window_us, max_waiting, n_ctx, "
                    "threads >= 0")
          .with("max_batch_tokens", o.max_batch_tokens)
          .with("batch_window_us", o.batch_window_us);
    }
    POWER_ASSIGN_OR_RETURN(runtime::ModelFile mf, runtime::open_model_file(path, key_source(o)));
    std::shared_ptr<const GgufFile> file = std::move(mf.file);
    LoadModelOptions lo;
    lo.kind = sdk::ModelKind::kEncoder;
    POWER_ASSIGN_OR_RETURN(model_, load_model(file, lo));
    POWER_ASSIGN_OR_RETURN(tok_, load_tokenizer(*file));
    const ModelHparams& hp = model_->hparams();
    if (tok_->n_tokens() != static_cast<size_t>(hp.n_vocab)) {
      return Status(StatusCode::kCorrupt, "tokenizer and token embedding disagree on the vocab")
          .with("tokens", tok_->n_tokens())
          .with("n_vocab", hp.n_vocab);
    }
    pooling_ = model_->spec().pooling;
    if (!o.pooling.empty()) {
      POWER_ASSIGN_OR_RETURN(pooling_, parse_pooling(o.pooling));
    }
    n_ctx_ = o.n_ctx == 0 ? hp.n_ctx_train : o.n_ctx;
    if (n_ctx_ > hp.n_ctx_train) {
      return Status(StatusCode::kInvalidArgument, "n_ctx exceeds the model's context")
          .with("n_ctx", n_ctx_)
          .with("model_n_ctx", hp.n_ctx_train);
    }
    if (o.max_batch_tokens < n_ctx_) {
      return Status(StatusCode::kInvalidArgument,
                    "max_batch_tokens must hold at least one full-context input")
          .with("max_batch_tokens", o.max_batch_tokens)
          .with("n_ctx", n_ctx_);
    }
    options_ = o;
    info_.path = path;
    info_.arch = hp.arch;
    info_.pooling = pooling_name(pooling_);
    info_.n_vocab = hp.n_vocab;
    info_.n_layer = hp.n_layer;
    info_.n_embd = hp.n_embd;
    info_.n_ctx = n_ctx_;
    info_.max_batch_tokens = o.max_batch_tokens;
    info_.weights_bytes = file->file_size();
    const int threads = o.threads > 0
                            ? o.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    info_.threads = threads;
    const uint64_t out_bytes =
        static_cast<uint64_t>(o.max_batch_tokens) * static_cast<uint64_t>(hp.n_embd) * 4;
    info_.workspace_bytes =
        model_->workspace_bytes(o.max_batch_tokens, n_ctx_, threads) + out_bytes;
    if (o.memory_budget_bytes > 0 &&
        info_.weights_bytes + info_.workspace_bytes > o.memory_budget_bytes) {
      return Status(StatusCode::kDoesNotFit,
                    "weights + workspace of the embedding model exceed the memory budget")
          .with("weights_bytes", info_.weights_bytes)
          .with("workspace_bytes", info_.workspace_bytes)
          .with("max_batch_tokens", o.max_batch_tokens)
          .with("budget_bytes", o.memory_budget_bytes);
    }
    POWER_ASSIGN_OR_RETURN(ws_, model_->make_workspace(o.max_batch_tokens, n_ctx_, threads));
    out_.resize(static_cast<size_t>(o.max_batch_tokens * hp.n_embd));
    worker_ = std::thread([this] { run(); });
    return Status();
  }

  std::vector<int32_t> tokenize(const std::string& text) const {
    text::EncodeOptions eo;
    eo.add_special = true;
    eo.parse_special = true;  // as the peer's embedding tool and server tokenize
    return tok_->encode(text, eo);
  }

  Result<EmbedResult> embed(const EmbedRequest& req) {
    auto job = std::make_shared<Job>();
    job->normalize = req.normalize;
    const bool from_text = req.token_inputs.empty();
    const size_t n_inputs = from_text ? req.texts.size() : req.token_inputs.size();
    if (n_inputs == 0) return Status(StatusCode::kInvalidArgument, "no inputs to embed");
    job->inputs.reserve(n_inputs);
    EmbedResult result;
    result.n_embd = model_->hparams().n_embd;
    const int32_t sep = tok_->special().sep;
    for (size_t i = 0; i < n_inputs; ++i) {
      std::vector<int32_t> ids = from_text ? tokenize(req.texts[i]) : req.token_inputs[i];
      if (ids.empty()) {
        return Status(StatusCode::kInvalidArgument, "input has no tokens").with("input", i);
      }
      for (int32_t id : ids) {
        if (id < 0 || id >= model_->hparams().n_vocab) {
          return Status(StatusCode::kInvalidArgument, "token id out of range")
              .with("input", i)
              .with("token", id)
              .with("n_vocab", model_->hparams().n_vocab);
        }
      }
      if (static_cast<int64_t>(ids.size()) > n_ctx_) {
        if (!req.truncate) {
          return Status(StatusCode::kOutOfRange,
                        "input is longer than the context (ask for truncation to cut it)")
              .with("input", i)
              .with("tokens", ids.size())
              .with("n_ctx", n_ctx_);
        }
        const bool keep_sep = from_text && sep != text::kNoToken && ids.back() == sep;
        ids.resize(static_cast<size_t>(n_ctx_));
        if (keep_sep) ids.back() = sep;
      }
      result.prompt_tokens += static_cast<int64_t>(ids.size());
      job->inputs.push_back(std::move(ids));
    }
    job->out.resize(n_inputs);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return Status(StatusCode::kCancelled, "embedding model is shutting down");
      if (queue_.size() >= static_cast<size_t>(options_.max_waiting)) {
        return Status(StatusCode::kQueueFull, "too many embedding requests waiting")
            .with("max_waiting", options_.max_waiting);
      }
      job->arrival = Clock::now();
      queue_.push_back(job);
      queued_tokens_ += result.prompt_tokens;
      work_cv_.notify_one();
      done_cv_.wait(lock, [&] { return job->finished; });
    }
    if (!job->status.ok()) return job->status;
    result.embeddings = std::move(job->out);
    return result;
  }

  EmbedStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  const EmbeddingModelInfo& info() const { return info_; }

 private:
  struct Slot {
    Job* job;
    size_t input;
  };

  void run() {
    const int64_t E = model_->hparams().n_embd;
    std::vector<Slot> slots;
    std::vector<std::span<const int32_t>> seqs;
    std::vector<std::shared_ptr<Job>> held;  // jobs with inputs in this pass
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) {
        for (auto& j : queue_) {
          j->status = Status(StatusCode::kCancelled, "embedding model is shutting down");
          j->finished = true;
        }
        queue_.clear();
        done_cv_.notify_all();
        return;
      }
      // Keep the batch open for the window, measured from the oldest waiting job.
      const auto deadline =
          queue_.front()->arrival + std::chrono::microseconds(options_.batch_window_us);
      work_cv_.wait_until(lock, deadline,
                          [&] { return stop_ || queued_tokens_ >= options_.max_batch_tokens; });
      if (stop_) continue;
      // Whole inputs in arrival order up to the token budget.
      slots.clear();
      seqs.clear();
      held.clear();
      int64_t tokens = 0;
      for (auto& j : queue_) {
        bool took = false;
        while (j->next < j->inputs.size()) {
          const auto n = static_cast<int64_t>(j->inputs[j->next].size());
          if (tokens + n > options_.max_batch_tokens) break;
          slots.push_back({j.get(), j->next});
          seqs.emplace_back(j->inputs[j->next]);
          tokens += n;
          ++j->next;
          took = true;
        }
        if (took) held.push_back(j);
        if (j->next < j->inputs.size()) break;  // the pass is full
      }
      while (!queue_.empty() && queue_.front()->next == queue_.front()->inputs.size()) {
        queue_.pop_front();
      }
      queued_tokens_ -= tokens;
      lock.unlock();

      const Status st = model_->encode(*ws_, seqs, pooling_, out_.data());
      // Split the rows back to their jobs (outside the lock: each slot is written only here).
      int64_t row = 0;
      for (size_t s = 0; s < slots.size(); ++s) {
        const int64_t rows =
            pooling_ == sdk::Pooling::kNone ? static_cast<int64_t>(seqs[s].size()) : 1;
        if (st.ok()) {
          Job& j = *slots[s].job;
          std::vector<float>& v = j.out[slots[s].input];
          v.assign(out_.begin() + row * E, out_.begin() + (row + rows) * E);
          if (j.normalize) {
            for (int64_t r = 0; r < rows; ++r) l2_normalize(v.data() + r * E, E);
          }
        }
        row += rows;
      }

      lock.lock();
      const bool shared = held.size() > 1;
      for (Slot& s : slots) {
        ++s.job->done;
        if (!st.ok() && s.job->status.ok()) s.job->status = st;
      }
      for (auto& j : held) {
        if (shared && !j->shared_pass) {
          j->shared_pass = true;
          ++stats_.merged_requests;
        }
        if (j->done == j->inputs.size()) {
          j->finished = true;
          ++stats_.requests;
        }
      }
      ++stats_.forward_passes;
      stats_.inputs += slots.size();
      stats_.tokens += static_cast<uint64_t>(tokens);
      stats_.max_pass_inputs = std::max<uint64_t>(stats_.max_pass_inputs, slots.size());
      stats_.max_pass_tokens = std::max<uint64_t>(stats_.max_pass_tokens, tokens);
      done_cv_.notify_all();
    }
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<text::Tokenizer> tok_;
  std::unique_ptr<Workspace> ws_;
  std::vector<float> out_;
  sdk::Pooling pooling_ = sdk::Pooling::kNone;
  int64_t n_ctx_ = 0;
  EmbedOptions options_;
  EmbeddingModelInfo info_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int64_t queued_tokens_ = 0;
  bool stop_ = false;
  EmbedStats stats_;
  std::thread worker_;
};

EmbeddingModel::EmbeddingModel(std::unique_ptr<EmbeddingModelImpl> impl) : impl_(std::move(impl)) {}
EmbeddingModel::~EmbeddingModel() = default;

Result<std::unique_ptr<EmbeddingModel>> EmbeddingModel::open(const std::string& path,
                                                             const EmbedOptions& options) {
  auto impl = std::make_unique<EmbeddingModelImpl>();
  POWER_RETURN_IF_ERROR(impl->init(path, options));
  return std::unique_ptr<EmbeddingModel>(new EmbeddingModel(std::move(impl)));
}

Result<EmbedResult> EmbeddingModel::embed(const EmbedRequest& request) {
  return impl_->embed(request);
}

std::vector<int32_t> EmbeddingModel::tokenize(const std::string& text) const {
  return impl_->tokenize(text);
}

const EmbeddingModelInfo& EmbeddingModel::info() const {
  return impl_->info();
}

EmbedStats EmbeddingModel::stats() const {
  return impl_->stats();
}

bool is_embedding_model_file(const std::string& path, const EmbedOptions& keys) {
  auto encrypted = secure::is_container_file(path);
  if (!encrypted.ok()) return false;
  std::shared_ptr<const GgufFile> f;
  if (*encrypted) {
    auto mf = runtime::open_model_file(path, key_source(keys));
    if (!mf.ok()) return false;
    f = std::move(mf->file);
  } else {
    auto plain = GgufFile::open(path);
    if (!plain.ok()) return false;
    f = std::move(*plain);
  }
  auto arch = f->get_string("general.architecture");
  if (!arch.ok()) return false;
  auto entry = ArchitectureRegistry::global().find(*arch);
  return entry != nullptr && entry->arch.kind == sdk::ModelKind::kEncoder;
}

}  // namespace power
