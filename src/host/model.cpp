#include "host/model.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/log.h"
#include "host/registry.h"
#include "host/weights.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_repack.h"
#include "tensor/quant.h"

namespace power {
namespace {

// The planner a package's plan() sees.
class HostPlanner final : public sdk::Planner {
 public:
  explicit HostPlanner(WorkspacePlan& plan) : plan_(plan) {}
  sdk::Buffer rows(int64_t width, const std::string& name) override {
    if (width <= 0) {
      if (st_.ok()) {
        st_ = Status(StatusCode::kInvalidArgument, "planned buffer of no width").with("name", name);
      }
      return sdk::Buffer{};
    }
    plan_.widths.push_back(width);
    plan_.names.push_back(name);
    return sdk::Buffer{static_cast<int32_t>(plan_.widths.size() - 1), width};
  }
  const Status& status() const { return st_; }

 private:
  WorkspacePlan& plan_;
  Status st_;
};

// The Forward a package's forward() sees: the workspace's batch and the CPU ops over it.
class HostForward final : public sdk::Forward {
 public:
  HostForward(Workspace& ws, CpuOps& ops, int64_t output_width, int64_t n_embd,
              sdk::Pooling pooling)
      : ws_(ws), ops_(ops), output_width_(output_width), n_embd_(n_embd), pooling_(pooling) {}

  sdk::Ops& ops() override { return ops_; }
  int64_t n_tokens() const override { return ws_.n_tokens; }
  int64_t n_chunks() const override { return static_cast<int64_t>(ws_.chunks.size()); }
  int64_t n_outputs() const override { return ws_.n_outputs; }
  sdk::Act act(sdk::Buffer b) override {
    if (b.id < 0 || static_cast<size_t>(b.id) >= ws_.widths.size() ||
        ws_.widths[static_cast<size_t>(b.id)] != b.width) {
      return sdk::Act{};  // the ops record the error naming it
    }
    return sdk::Act{b.id, ws_.n_tokens, b.width, 0, b.width};
  }
  sdk::Act output() override {
    return sdk::Act{kOutputBuffer, ws_.n_outputs, output_width_, 0, ws_.output_ld};
  }
  sdk::Act hidden_in() override {
    if (ws_.hidden_in == nullptr) return sdk::Act{};
    return sdk::Act{kHiddenInBuffer, ws_.n_tokens, n_embd_, 0, ws_.hidden_in_ld};
  }
  void set_hidden(sdk::Act hidden) override { ws_.hidden = hidden; }
  sdk::Pooling pooling() const override { return pooling_; }
  std::span<const int32_t> tokens() const override {
    return {ws_.token_ids.data(), static_cast<size_t>(ws_.n_tokens)};
  }
  std::span<const int32_t> positions() const override {
    return {ws_.pos.data(), static_cast<size_t>(ws_.n_tokens)};
  }

 private:
  Workspace& ws_;
  CpuOps& ops_;
  int64_t output_width_, n_embd_;
  sdk::Pooling pooling_;
};

const char* kind_name(sdk::ModelKind k) {
  switch (k) {
    case sdk::ModelKind::kDecoder:
      return "decoder";
    case sdk::ModelKind::kEncoder:
      return "encoder";
    case sdk::ModelKind::kDraftHead:
      return "draft head";
  }
  return "?";
}

std::vector<float> to_f32(const TensorView& view) {
  std::vector<float> out(static_cast<size_t>(view.n_elements()));
  for (int64_t r = 0; r < view.n_rows(); ++r) matrix_row_f32(view, r, out.data() + r * view.ne[0]);
  return out;
}

// Loads a package: its declarations, then every check, then the weights' device forms and the
// plan. `create` makes the package object.
Status load_package(Model& m, const std::function<std::unique_ptr<sdk::Model>()>& create,
                    const LoadModelOptions& o, sdk::ModelSpec& spec,
                    std::unique_ptr<sdk::Model>& package, std::deque<BoundWeight>& weights,
                    const GgufFile& file, const GgufModelFile& model_file) {
  (void)m;
  package = create();
  if (!package) return Status(StatusCode::kInternal, "the architecture made no model object");
  WeightBinder binder(file);
  POWER_RETURN_IF_ERROR(package->load(model_file, binder, spec));
  POWER_RETURN_IF_ERROR(binder.status());
  if (o.kind != sdk::ModelKind::kDraftHead) binder.warn_unused();
  weights = std::move(binder.bound());
  return Status();
}

}  // namespace

Model::~Model() = default;

int64_t mtp_layer_count(const GgufFile& file) {
  auto arch = file.get_string("general.architecture");
  if (!arch.ok()) return 0;
  auto n = file.get_u64(*arch + ".nextn_predict_layers");
  return n.ok() ? static_cast<int64_t>(*n) : 0;
}

namespace {

// Everything after the package's load(): checks, device forms, plan, packed copies.
Status finish_load(Model& m, const Device& device, const sdk::ModelSpec& spec,
                   std::deque<BoundWeight>& weights, sdk::Model& package, WorkspacePlan& plan,
                   StateLayout& layout, KvCacheConfig& kv, std::vector<int64_t>& rec_floats,
                   std::vector<bool>& declared) {
  (void)m;
  // Sizes.
  if ((spec.kind != sdk::ModelKind::kEncoder && spec.n_vocab <= 0) || spec.n_embd <= 0) {
    return Status(StatusCode::kInvalidArgument, "the model declared no vocabulary or width")
        .with("n_vocab", spec.n_vocab)
        .with("n_embd", spec.n_embd);
  }
  // Ops.
  declared.assign(static_cast<size_t>(sdk::Op::kCount), false);
  for (sdk::Op op : spec.ops) {
    if (op >= sdk::Op::kCount) {
      return Status(StatusCode::kInvalidArgument, "the model declared an unknown op")
          .with("op", static_cast<int>(op));
    }
    if (!device.supports(op)) {
      return Status(StatusCode::kUnsupported, "the device does not support an op the model uses")
          .with("op", sdk::op_name(op))
          .with("device", device.name());
    }
    declared[static_cast<size_t>(op)] = true;
  }
  // Tensors: the device can use each bound type in the declared ways.
  for (BoundWeight& b : weights) {
    if (!device.supports_type(b.view.type, b.uses)) {
      return Status(StatusCode::kUnsupported, "tensor type is not supported")
          .with("tensor", b.name)
          .with("type", ggml_type_name(b.view.type))
          .with("device", device.name());
    }
    if ((b.uses & (sdk::kUseVector | sdk::kUseConv)) != 0) b.f32 = to_f32(b.view);
  }
  // State: the runtime's KV cache holds one geometry for all attention layers.
  layout.kv_layer.assign(spec.state.size(), -1);
  layout.recurrent_layer.assign(spec.state.size(), -1);
  layout.recurrent_values_offset.assign(spec.state.size(), 0);
  layout.recurrent_values.assign(spec.state.size(), 0);
  kv = KvCacheConfig{};
  rec_floats.clear();
  int n_kv = 0;
  for (size_t i = 0; i < spec.state.size(); ++i) {
    const sdk::LayerState& s = spec.state[i];
    if (s.kind == sdk::StateKind::kAttention) {
      if (s.n_head_kv <= 0 || s.head_dim_k <= 0 || s.head_dim_v <= 0 || s.head_dim_k > 65536 ||
          s.head_dim_v > 65536 || s.n_head_kv > 65536) {
        return Status(StatusCode::kInvalidArgument, "attention state of no size").with("layer", i);
      }
      if (n_kv == 0) {
        kv.n_kv_heads = static_cast<int>(s.n_head_kv);
        kv.head_dim_k = static_cast<int>(s.head_dim_k);
        kv.head_dim_v = static_cast<int>(s.head_dim_v);
      } else if (kv.n_kv_heads != s.n_head_kv || kv.head_dim_k != s.head_dim_k ||
                 kv.head_dim_v != s.head_dim_v) {
        return Status(StatusCode::kUnsupported,
                      "attention layers with different KV geometries are not supported")
            .with("layer", i);
      }
      layout.kv_layer[i] = n_kv++;
    } else if (s.kind == sdk::StateKind::kRecurrent) {
      const int64_t conv = s.conv_kernel > 0 ? (s.conv_kernel - 1) * s.conv_channels : 0;
      if (s.conv_channels < 0 || s.conv_kernel < 0 || s.values < 0 || conv + s.values <= 0) {
        return Status(StatusCode::kInvalidArgument, "recurrent state of no size").with("layer", i);
      }
      layout.recurrent_layer[i] = static_cast<int>(rec_floats.size());
      layout.recurrent_values_offset[i] = conv;
      layout.recurrent_values[i] = s.values;
      rec_floats.push_back(conv + s.values);
    }
  }
  kv.n_layer = n_kv;
  // The plan.
  HostPlanner planner(plan);
  package.plan(planner);
  POWER_RETURN_IF_ERROR(planner.status());
  int64_t max_row = spec.n_embd;
  for (int64_t w : plan.widths) max_row = std::max(max_row, w);
  for (const BoundWeight& b : weights) {
    if ((b.uses & (sdk::kUseMatmul | sdk::kUseRows)) != 0)
      max_row = std::max(max_row, b.view.ne[0]);
  }
  plan.max_row = max_row;
  return Status();
}

}  // namespace

// Where each weight lives (device/residency.h): the plan under o.weights_budget, the packed
// copies of the pinned matrices, and the streamer for the rest. Everything that can fail
// (the streamer's file and staging) happens before a bound weight changes.
Status place_weights(Model& m, const LoadModelOptions& o) {
  std::deque<BoundWeight>& weights = m.weights_;
  const GgufFile& file = *m.file_;
  const uint8_t* base = file.bytes().data();
  // One plan entry per tensor (a table bound twice, for rows and as the output matrix, is one).
  std::vector<ResidencyTensor> rts;
  std::vector<TensorView> views;
  std::vector<uint32_t> uses;
  std::map<const void*, size_t> index;
  for (const BoundWeight& b : weights) {
    auto [it, fresh] = index.try_emplace(b.view.data, rts.size());
    if (!fresh) {
      uses[it->second] |= b.uses;
      continue;
    }
    ResidencyTensor t;
    t.name = b.name;
    t.type = b.view.type;
    for (int d = 0; d < 4; ++d) {
      if (d < 2 || b.view.ne[d] != 1) t.shape.push_back(b.view.ne[d]);
    }
    t.file_offset = static_cast<uint64_t>(static_cast<const uint8_t*>(b.view.data) - base);
    t.file_bytes = b.view.row_bytes() * static_cast<uint64_t>(b.view.n_rows());
    rts.push_back(std::move(t));
    views.push_back(b.view);
    uses.push_back(b.uses);
  }
  // The matrices the kernels pack (token-embedding tables used only for row lookups are not
  // matrices here).
  auto matrix = [&](size_t i) {
    const TensorView& v = views[i];
    return (uses[i] & sdk::kUseMatmul) != 0 && v.ne[2] == 1 && v.ne[3] == 1 &&
           matmul_repack_supported(v.type);
  };
  uint64_t total = 0;
  for (size_t i = 0; i < rts.size(); ++i) {
    ResidencyTensor& t = rts[i];
    const bool vec = (uses[i] & (sdk::kUseVector | sdk::kUseConv)) != 0;
    t.small = vec && (uses[i] & (sdk::kUseMatmul | sdk::kUseRows)) == 0;
    t.rows_only = (uses[i] & sdk::kUseRows) != 0 && (uses[i] & sdk::kUseMatmul) == 0 && !vec;
    const uint64_t pb = matrix(i) ? packed_bytes(views[i]) : 0;
    if (t.small) {
      t.resident_bytes = static_cast<uint64_t>(views[i].n_elements()) * sizeof(float);
    } else if (pb > 0) {
      t.resident_bytes = pb + (views[i].ne[1] % 8 != 0 ? t.file_bytes : 0);
    } else {
      t.resident_bytes = t.file_bytes;
    }
    total += t.resident_bytes;
  }
  uint64_t budget = o.weights_budget.resolve(total);
  if (file.mapping().is_secure_memory()) {
    // Decrypted weights live in locked memory already, and the file on disk is ciphertext:
    // there is nothing to stream from.
    if (budget < total) {
      return Status(StatusCode::kUnsupported,
                    "the weights of an encrypted model are decrypted into memory and cannot be "
                    "streamed: give a weights budget of at least the model's size, or auto")
          .with("budget_bytes", budget)
          .with("model_bytes", total);
    }
    budget = UINT64_MAX;
  } else if (!o.weights_budget.set && o.weights_budget_fn) {
    budget = o.weights_budget_fn(m, total);
  }
  m.residency_ =
      std::make_unique<ResidencyPlan>(plan_residency(rts, budget, m.model_file_->sha256()));
  const ResidencyPlan& plan = *m.residency_;
  // The plan sorted the tensors by offset: map them back.
  std::map<const void*, int> plan_index;
  std::vector<TensorView> plan_views(plan.tensors.size());
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const void* key = base + plan.tensors[i].file_offset;
    plan_index[key] = static_cast<int>(i);
    plan_views[i] = views[index.at(key)];
  }
  if (plan.streams() && !o.mirror_dir.empty()) {
    MirrorOptions mo;
    mo.dir = o.mirror_dir;
    mo.max_bytes = o.mirror_bytes;
    mo.tensor_manifest_dir = o.tensor_manifest_dir;
    // A mirror is a cache: when it cannot be made or read, the artifact serves (warned).
    auto mirror = WeightsMirror::open_or_build(mo, file, plan);
    if (mirror.ok()) {
      m.mirror_ = std::move(*mirror);
    } else {
      POWER_LOG_WARN("weights mirror not used, streaming from the artifact: {}",
                     mirror.status().to_string());
    }
  }
  if (plan.streams()) {
    POWER_ASSIGN_OR_RETURN(m.streamer_, WeightStreamer::create(file.path(), plan, plan_views,
                                                               o.prefetch, 0, m.mirror_.get()));
  }
  std::vector<TensorView> matrices;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const size_t v = index.at(base + plan.tensors[i].file_offset);
    if (plan.tier[i] == WeightTier::kPinned && matrix(v)) matrices.push_back(views[v]);
  }
  // Packed in one call so that the copies share one huge-page region. Each matrix's pages in
  // the mapping leave the process as soon as its copy is made, so the load's peak stays near
  // the resident bytes instead of twice them, and so does the RSS afterwards. Under a budget
  // they leave the page cache too; at a full budget they stay there (a reload or a second
  // process finds them), unmapped only.
  // A packed matrix's bytes the kernels no longer read in the mapping: its rows up to the last
  // full group of 8 (the rows past it are still read from the original layout).
  auto packed_rows_bytes = [](const TensorView& v) {
    return v.row_bytes() * static_cast<uint64_t>(v.ne[1] / 8 * 8);
  };
  m.packs_.add_all(matrices, [&](const TensorView& v) {
    const auto offset = static_cast<uint64_t>(static_cast<const uint8_t*>(v.data) - base);
    file.mapping().release(offset, packed_rows_bytes(v), m.unread_page_cache());
  });
  // What the kernels will not read from the mapping (streamed tensors, and packed matrices
  // now served from their copies) leaves the process's resident set (and, under a budget, the
  // page cache), here and after any later pass over every tensor's bytes. Decrypted weights
  // are not a mapping: their bytes stay.
  const bool mapped = !file.mapping().is_secure_memory();
  for (size_t i = 0; i < plan.tensors.size() && mapped; ++i) {
    const size_t v = index.at(base + plan.tensors[i].file_offset);
    if (plan.tier[i] == WeightTier::kStreamed) {
      m.unread_.emplace_back(plan.tensors[i].file_offset, plan.tensors[i].file_bytes);
    } else if (plan.tier[i] == WeightTier::kPinned && matrix(v) && matmul_uses_repacked(views[v])) {
      m.unread_.emplace_back(plan.tensors[i].file_offset, packed_rows_bytes(views[v]));
    }
  }
  if (!plan.streams()) return Status();
  // Row-lookup tables through the weights cache: each read row by row from the artifact.
  std::map<const void*, const CachedRows*> cached;
  if (o.weights_cache != nullptr) {
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      if (plan.tier[i] != WeightTier::kRows) continue;
      const TensorView& v = plan_views[i];
      POWER_ASSIGN_OR_RETURN(
          std::unique_ptr<CachedRows> rows,
          CachedRows::open(o.weights_cache, file.path(), plan.tensors[i].file_offset, v.row_bytes(),
                           v.n_rows()));
      cached[v.data] = rows.get();
      m.weights_cache_ = o.weights_cache;
      m.cached_rows_.push_back(std::move(rows));
      m.unread_.emplace_back(plan.tensors[i].file_offset, plan.tensors[i].file_bytes);
    }
  }
  for (BoundWeight& b : weights) {
    if (auto c = cached.find(b.view.data); c != cached.end()) b.cached_rows = c->second;
    const int i = plan_index.at(b.view.data);
    if (plan.tier[static_cast<size_t>(i)] != WeightTier::kStreamed) continue;
    b.stream_group = plan.group_of[static_cast<size_t>(i)];
    b.stream_tensor = i;
    b.stream_pieces = plan.pieces[static_cast<size_t>(i)];
  }
  m.drop_unread_pages();
  POWER_LOG_INFO(
      "weights: {} of {} resident, {} streamed in {} groups (budget {} bytes, "
      "prefetch {}, staging {} bytes, plan {})",
      plan.pinned_bytes, plan.total_bytes, plan.streamed_bytes, plan.streamed.size(),
      plan.budget_bytes, o.prefetch, m.streamer_->staging_bytes(), plan.digest.substr(0, 16));
  return Status();
}

Result<std::unique_ptr<Model>> load_model(std::shared_ptr<const GgufFile> file,
                                          const LoadModelOptions& o) {
  POWER_ASSIGN_OR_RETURN(std::string arch, file->get_string("general.architecture"));
  std::shared_ptr<const ArchitectureEntry> entry = ArchitectureRegistry::global().find(arch);
  if (entry == nullptr) {
    std::string known;
    for (const std::string& n : supported_architectures()) known += (known.empty() ? "" : ", ") + n;
    return Status(StatusCode::kUnsupported, "architecture is not supported")
        .with("architecture", arch)
        .with("supported", known);
  }
  const auto& create =
      o.kind == sdk::ModelKind::kDraftHead ? entry->arch.create_draft_head : entry->arch.create;
  if (!create) {
    return Status(StatusCode::kUnsupported, "the architecture has no draft-head package")
        .with("architecture", arch);
  }
  std::unique_ptr<Model> m(new Model());
  m->file_ = file;
  m->model_file_ = std::make_unique<GgufModelFile>(file, o.sha256);
  m->entry_ = entry;
  m->device_ = o.device != nullptr ? o.device : &cpu_device();
  POWER_RETURN_IF_ERROR(
      load_package(*m, create, o, m->spec_, m->package_, m->weights_, *file, *m->model_file_)
          .with("architecture", arch));
  const sdk::ModelSpec& spec = m->spec_;
  if (spec.kind != o.kind) {
    if (o.kind == sdk::ModelKind::kDecoder && spec.kind == sdk::ModelKind::kEncoder) {
      return Status(StatusCode::kUnsupported,
                    "the model is a text-embedding encoder, not a generative model: use power "
                    "embed or /v1/embeddings")
          .with("architecture", arch);
    }
    if (o.kind == sdk::ModelKind::kEncoder) {
      return Status(StatusCode::kUnsupported,
                    "not a BERT encoder or other text-embedding model: use power run or "
                    "/v1/chat/completions")
          .with("architecture", arch);
    }
    return Status(StatusCode::kUnsupported, "the package is not the kind of model asked for")
        .with("architecture", arch)
        .with("package", kind_name(spec.kind))
        .with("expected", kind_name(o.kind));
  }
  POWER_RETURN_IF_ERROR(finish_load(*m, *m->device_, spec, m->weights_, *m->package_, m->plan_,
                                    m->layout_, m->kv_geometry_, m->layout_recurrent_floats_,
                                    m->declared_)
                            .with("architecture", arch));
  m->hp_.arch = arch;
  m->hp_.n_vocab = spec.kind == sdk::ModelKind::kEncoder ? spec.n_vocab : spec.n_vocab;
  m->hp_.n_embd = spec.n_embd;
  m->hp_.n_layer = spec.n_layer > 0 ? spec.n_layer : static_cast<int64_t>(spec.state.size());
  m->hp_.n_ctx_train = spec.n_ctx_train;
  POWER_RETURN_IF_ERROR(place_weights(*m, o).with("architecture", arch));
  if (o.mlock) m->lock_weights();
  return m;
}

Result<std::unique_ptr<Model>> load_draft_head(const Model& main) {
  const std::string key = main.hparams().arch + ".nextn_predict_layers";
  auto n = main.file().get_u64(key);
  if (!n.ok() || *n == 0) {
    return Status(StatusCode::kInvalidArgument, "the model has no MTP layers")
        .with("missing_key", key);
  }
  LoadModelOptions o;
  o.device = &main.device();
  o.kind = sdk::ModelKind::kDraftHead;
  o.sha256 = main.model_file_->sha256();
  return load_model(main.file_, o);
}

void Model::lock_weights() {
  // What the kernels read from memory, each region once: a resident weight's rows in the
  // mapping (past the rows its packed copy serves), the packed copy, its f32 copy; the
  // streamer's staging slots and read buffers. Not streamed weights, nor tables whose rows come
  // through the weights cache (their pages in the mapping are dropped, not read).
  std::vector<std::span<const uint8_t>> regions;
  std::set<const void*> seen;
  for (const BoundWeight& b : weights_) {
    if (b.stream_group >= 0 || b.cached_rows != nullptr || !seen.insert(b.view.data).second) {
      continue;
    }
    const uint64_t bytes = b.view.row_bytes() * static_cast<uint64_t>(b.view.n_rows());
    uint64_t skip = 0;
    if (std::span<const uint8_t> packed = packed_copy_bytes(b.view); !packed.empty()) {
      regions.push_back(packed);
      skip = b.view.row_bytes() * static_cast<uint64_t>(b.view.ne[1] / 8 * 8);
    }
    if (skip < bytes) {
      regions.emplace_back(static_cast<const uint8_t*>(b.view.data) + skip,
                           static_cast<size_t>(bytes - skip));
    }
    if (!b.f32.empty()) {
      regions.emplace_back(reinterpret_cast<const uint8_t*>(b.f32.data()),
                           b.f32.size() * sizeof(float));
    }
  }
  if (streamer_ != nullptr) {
    for (std::span<const uint8_t> r : streamer_->staging_regions()) regions.push_back(r);
  }
  lockable_bytes_ = 0;
  for (std::span<const uint8_t> r : regions) lockable_bytes_ += r.size();
  for (std::span<const uint8_t> r : regions) {
    if (r.empty()) continue;
    if (::mlock(r.data(), r.size()) != 0) {
      const int err = errno;
      struct rlimit lim {};
      ::getrlimit(RLIMIT_MEMLOCK, &lim);
      lock_status_ =
          Status(StatusCode::kResourceExhausted,
                 fmt::format("cannot lock the weights in RAM (mlock: {})", std::strerror(err)))
              .with("locked_bytes", locked_bytes_)
              .with("weights_bytes", lockable_bytes_)
              .with("memlock_limit", lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                                                   : std::to_string(lim.rlim_cur))
              .with("fix",
                    "raise the limit (ulimit -l, systemd LimitMEMLOCK=) or run without mlock");
      return;
    }
    locked_bytes_ += r.size();
  }
}

CachedRows::Counters Model::cached_rows_counters() const {
  CachedRows::Counters sum;
  for (const auto& r : cached_rows_) {
    const CachedRows::Counters c = r->counters();
    sum.hits += c.hits;
    sum.misses += c.misses;
    sum.read_bytes += c.read_bytes;
  }
  return sum;
}

void Model::drop_unread_pages() const {
  for (const auto& [offset, bytes] : unread_)
    file_->mapping().release(offset, bytes, unread_page_cache());
}

uint64_t Model::resident_weight_bytes() const {
  if (streamer_ == nullptr) {
    uint64_t unread = 0;
    for (const auto& [offset, bytes] : unread_) unread += bytes;
    return file_->file_size() - unread + packs_.bytes();
  }
  return residency_->pinned_bytes + streamer_->staging_bytes();
}

Result<std::unique_ptr<Workspace>> Model::make_workspace(int64_t max_batch_tokens, int64_t n_ctx,
                                                         int n_threads) const {
  if (max_batch_tokens <= 0 || n_ctx <= 0) {
    return Status(StatusCode::kInvalidArgument, "batch and context sizes must be positive");
  }
  return std::make_unique<Workspace>(plan_, max_batch_tokens, n_ctx, n_threads);
}

uint64_t Model::workspace_bytes(int64_t max_batch_tokens, int64_t n_ctx, int n_threads) const {
  return Workspace::planned_bytes(plan_, max_batch_tokens, n_ctx, n_threads);
}

KvCacheConfig Model::kv_config(int64_t n_ctx_tokens, int n_sequences, GgmlType dtype) const {
  KvCacheConfig c = kv_geometry_;
  c.block_tokens = 16;
  c.n_blocks = static_cast<int>((n_ctx_tokens + c.block_tokens - 1) / c.block_tokens) *
               std::max(1, n_sequences);
  c.dtype = dtype;
  return c;
}

RecurrentStateConfig Model::recurrent_config(int n_sequences) const {
  RecurrentStateConfig c;
  c.layer_floats = layout_recurrent_floats_;
  c.n_slots = layout_recurrent_floats_.empty() ? 0 : n_sequences;
  return c;
}

Status Model::attach_state(KvSequence& seq, std::unique_ptr<RecurrentState>& state) const {
  if (!has_recurrent_state()) return Status();
  if (state == nullptr) {
    POWER_ASSIGN_OR_RETURN(state, RecurrentState::create(recurrent_config(1)));
  }
  POWER_ASSIGN_OR_RETURN(int slot, state->allocate());
  seq.attach_recurrent(state.get(), slot);
  return Status();
}

int64_t Model::logit_rows(std::span<const ForwardChunk> chunks) {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.all_logits ? static_cast<int64_t>(c.tokens.size()) : 1;
  return n;
}

int64_t Model::output_rows(std::span<const std::span<const int32_t>> inputs, sdk::Pooling pooling) {
  if (pooling != sdk::Pooling::kNone) return static_cast<int64_t>(inputs.size());
  int64_t n = 0;
  for (const auto& s : inputs) n += static_cast<int64_t>(s.size());
  return n;
}

Status Model::fill_batch(Workspace& ws, std::span<const ForwardChunk> chunks, bool encoder) const {
  int64_t t = 0, out = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ForwardChunk& ch = chunks[c];
    const int32_t start = encoder ? 0 : ch.seq->n_tokens();
    ws.chunk_start[c] = static_cast<int32_t>(t);
    const auto n = static_cast<int64_t>(ch.tokens.size());
    for (int64_t i = 0; i < n; ++i, ++t) {
      const auto row = static_cast<size_t>(t);
      ws.token_ids[row] = ch.tokens[static_cast<size_t>(i)];
      ws.pos[row] = start + static_cast<int32_t>(i);
      ws.chunk_of[row] = static_cast<int32_t>(c);
      if (ch.all_logits || i == n - 1)
        ws.output_rows[static_cast<size_t>(out++)] = static_cast<int32_t>(t);
    }
  }
  ws.chunk_start[chunks.size()] = static_cast<int32_t>(t);
  ws.n_tokens = t;
  ws.n_outputs = out;
  ws.chunks = chunks;
  ws.hidden = sdk::Act{};
  return Status();
}

Status Model::run(Workspace& ws, sdk::Pooling pooling) const {
  CpuOps ops(ws, layout_, declared_);
  const int64_t out_width = spec_.kind == sdk::ModelKind::kEncoder ? spec_.n_embd : spec_.n_vocab;
  HostForward f(ws, ops, out_width, spec_.n_embd, pooling);
  ws.streamer = streamer_.get();
  Status st = package_->forward(f);
  if (streamer_ != nullptr) streamer_->release(ws.stream_cursor);
  if (st.ok()) st = ops.status();
  ws.chunks = {};
  if (!st.ok()) return st.with("architecture", hp_.arch);
  return st;
}

namespace {

Status check_tokens(std::span<const int32_t> tokens, int64_t n_vocab) {
  for (int32_t tok : tokens) {
    if (tok < 0 || tok >= n_vocab) {
      return Status(StatusCode::kInvalidArgument, "token id out of range")
          .with("token", tok)
          .with("n_vocab", n_vocab);
    }
  }
  return Status();
}

}  // namespace

Status Model::forward(Workspace& ws, std::span<const ForwardChunk> chunks, float* logits) const {
  if (spec_.kind != sdk::ModelKind::kDecoder) {
    return Status(StatusCode::kInvalidArgument, "forward() runs decoders").with("arch", hp_.arch);
  }
  int64_t total = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ForwardChunk& ch = chunks[c];
    if (ch.seq == nullptr || ch.tokens.empty()) {
      return Status(StatusCode::kInvalidArgument, "empty chunk in batch").with("chunk", c);
    }
    POWER_RETURN_IF_ERROR(check_tokens(ch.tokens, hp_.n_vocab));
    const int64_t end = ch.seq->n_tokens() + static_cast<int64_t>(ch.tokens.size());
    if (end > ws.n_ctx) {
      return Status(StatusCode::kOutOfRange, "sequence exceeds the context size")
          .with("positions", end)
          .with("n_ctx", ws.n_ctx);
    }
    if (spec_.n_ctx_max > 0 && end > spec_.n_ctx_max) {
      return Status(StatusCode::kOutOfRange, "sequence exceeds the positions the model has")
          .with("positions", end)
          .with("n_ctx_max", spec_.n_ctx_max);
    }
    if (has_recurrent_state() && ch.seq->recurrent() == nullptr) {
      return Status(StatusCode::kInvalidArgument, "the sequence has no recurrent state slot")
          .with("chunk", c);
    }
    total += static_cast<int64_t>(ch.tokens.size());
  }
  if (total > ws.max_tokens) {
    return Status(StatusCode::kOutOfRange, "batch exceeds the workspace's maximum tokens")
        .with("tokens", total)
        .with("max", ws.max_tokens);
  }
  for (const ForwardChunk& ch : chunks) {
    POWER_RETURN_IF_ERROR(ch.seq->reserve(ch.seq->n_tokens() + static_cast<int>(ch.tokens.size())));
  }
  POWER_RETURN_IF_ERROR(fill_batch(ws, chunks, false));
  ws.output = logits;
  ws.output_ld = hp_.n_vocab;
  ws.hidden_in = nullptr;
  ws.hidden_in_ld = 0;
  POWER_RETURN_IF_ERROR(run(ws, sdk::Pooling::kNone));
  for (const ForwardChunk& ch : chunks) {
    ch.seq->set_n_tokens(ch.seq->n_tokens() + static_cast<int>(ch.tokens.size()));
  }
  return Status();
}

Status Model::forward_head(Workspace& ws, KvSequence& seq, const float* hidden,
                           std::span<const int32_t> tokens, float* out_hidden,
                           float* out_logits) const {
  if (spec_.kind != sdk::ModelKind::kDraftHead) {
    return Status(StatusCode::kInvalidArgument, "forward_head() runs draft heads")
        .with("arch", hp_.arch);
  }
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) return Status(StatusCode::kInvalidArgument, "empty MTP batch");
  if (n > ws.max_tokens) {
    return Status(StatusCode::kOutOfRange, "MTP batch exceeds the workspace's maximum tokens")
        .with("tokens", n)
        .with("max", ws.max_tokens);
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp_.n_vocab) {
      return Status(StatusCode::kInvalidArgument, "token id out of range").with("token", t);
    }
  }
  const int64_t start = seq.n_tokens();
  if (start + n > ws.n_ctx) {
    return Status(StatusCode::kOutOfRange, "MTP sequence exceeds the context size")
        .with("positions", start + n)
        .with("n_ctx", ws.n_ctx);
  }
  POWER_RETURN_IF_ERROR(seq.reserve(static_cast<int>(start + n)));
  const ForwardChunk chunk{&seq, tokens, false};
  POWER_RETURN_IF_ERROR(fill_batch(ws, std::span<const ForwardChunk>(&chunk, 1), false));
  ws.output = out_logits;
  ws.output_ld = hp_.n_vocab;
  ws.hidden_in = hidden;
  ws.hidden_in_ld = hp_.n_embd;
  Status st = run(ws, sdk::Pooling::kNone);
  ws.hidden_in = nullptr;
  POWER_RETURN_IF_ERROR(st);
  const float* last = ws.hidden_row(n - 1);
  if (last == nullptr || ws.hidden.cols != hp_.n_embd) {
    return Status(StatusCode::kInternal, "the draft head left no hidden state")
        .with("arch", hp_.arch);
  }
  std::copy(last, last + hp_.n_embd, out_hidden);
  seq.set_n_tokens(static_cast<int>(start + n));
  return Status();
}

Status Model::encode(Workspace& ws, std::span<const std::span<const int32_t>> inputs,
                     sdk::Pooling pooling, float* out) const {
  if (spec_.kind != sdk::ModelKind::kEncoder) {
    return Status(StatusCode::kInvalidArgument, "encode() runs encoders").with("arch", hp_.arch);
  }
  const int64_t max_len = spec_.n_ctx_max > 0 ? spec_.n_ctx_max : ws.n_ctx;
  int64_t total = 0;
  for (size_t s = 0; s < inputs.size(); ++s) {
    const auto n = static_cast<int64_t>(inputs[s].size());
    if (n == 0) {
      return Status(StatusCode::kInvalidArgument, "empty input sequence").with("input", s);
    }
    if (n > max_len || n > ws.n_ctx) {
      return Status(StatusCode::kOutOfRange, "input is longer than the model's context")
          .with("input", s)
          .with("tokens", n)
          .with("n_ctx", std::min(max_len, ws.n_ctx));
    }
    for (int32_t id : inputs[s]) {
      if (id < 0 || id >= hp_.n_vocab) {
        return Status(StatusCode::kInvalidArgument, "token id out of range")
            .with("input", s)
            .with("token", id)
            .with("n_vocab", hp_.n_vocab);
      }
    }
    total += n;
  }
  if (inputs.empty()) return Status();
  if (total > ws.max_tokens) {
    return Status(StatusCode::kOutOfRange, "batch exceeds the workspace's maximum tokens")
        .with("tokens", total)
        .with("max", ws.max_tokens);
  }
  // Encoder chunks have no sequence state; every token is an output row without pooling.
  std::vector<ForwardChunk>& chunks = ws.encoder_chunks;  // capacity max_tokens: no allocation
  chunks.clear();
  for (const auto& in : inputs) chunks.push_back({nullptr, in, pooling == sdk::Pooling::kNone});
  POWER_RETURN_IF_ERROR(fill_batch(ws, chunks, true));
  if (pooling != sdk::Pooling::kNone) ws.n_outputs = static_cast<int64_t>(inputs.size());
  ws.output = out;
  ws.output_ld = hp_.n_embd;
  ws.hidden_in = nullptr;
  return run(ws, pooling);
}

std::vector<sdk::TensorIdentity> Model::bound_tensors() const {
  std::vector<sdk::TensorIdentity> ids;
  for (const BoundWeight& b : weights_) {
    const GgufTensor* t = file_->find_tensor(b.name);
    if (t == nullptr) continue;
    sdk::TensorIdentity id;
    id.artifact_sha256 = model_file_->sha256();
    id.name = b.name;
    id.dtype = to_sdk(t->type);
    for (size_t i = 0; i < t->ne.size() && i < 4; ++i) id.ne[i] = static_cast<int64_t>(t->ne[i]);
    id.offset = t->file_offset;
    id.n_bytes = t->n_bytes;
    ids.push_back(std::move(id));
  }
  std::sort(ids.begin(), ids.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return ids;
}

}  // namespace power
