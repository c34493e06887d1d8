#include "onnx/service.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/log.h"
#include "base/sha256.h"
#include "base/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "onnx/media.h"
#include "onnx/models/mnist.h"
#include "power/runtime.h"
#include "receipt/canonical_json.h"
#include "receipt/receipt.h"
#include "receipt/signing_key.h"
#include "runtime/admission.h"

namespace power::onnx {

using json = nlohmann::json;

const char* task_name(Task t) {
  switch (t) {
    case Task::kVad:
      return "vad";
    case Task::kOcr:
      return "ocr";
    case Task::kClassify:
      return "classify";
  }
  return "?";
}

json vad_json(const std::vector<float>& probs, const std::vector<SpeechSegment>& segs,
              int sample_rate) {
  json js = json::array();
  for (const auto& s : segs) {
    js.push_back({{"start", samples_to_seconds(s.start, sample_rate)},
                  {"end", samples_to_seconds(s.end, sample_rate)}});
  }
  return {{"probs", probs}, {"segments", js}};
}

json ocr_json(const std::vector<OcrLine>& lines) {
  json jl = json::array();
  for (const auto& l : lines) {
    json box = json::array();
    for (const auto& p : l.box) box.push_back({p[0], p[1]});
    jl.push_back({{"text", l.text}, {"box", box}, {"score", l.score}});
  }
  return {{"lines", jl}};
}

json classify_json(int digit, const std::vector<float>& scores) {
  return {{"class", digit}, {"scores", scores}};
}

Status apply_config_key(const std::string& key, const json& v, ServiceOptions* o, bool* handled) {
  *handled = true;
  auto str = [&](std::string* out) -> Status {
    if (!v.is_string()) {
      return make_error(StatusCode::kInvalidArgument, "config key '{}' must be a string", key);
    }
    *out = v.get<std::string>();
    return Status();
  };
  auto strs = [&](std::vector<std::string>* out) -> Status {
    if (v.is_string()) {
      out->push_back(v.get<std::string>());
      return Status();
    }
    if (!v.is_array()) {
      return make_error(StatusCode::kInvalidArgument,
                        "config key '{}' must be a string or an array of strings", key);
    }
    for (const auto& s : v) {
      if (!s.is_string()) {
        return make_error(StatusCode::kInvalidArgument,
                          "config key '{}' must be a string or an array of strings", key);
      }
      out->push_back(s.get<std::string>());
    }
    return Status();
  };
  auto integer = [&](int64_t lo, int64_t hi, int64_t* out) -> Status {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      return make_error(StatusCode::kInvalidArgument,
                        "config key '{}' must be an integer between {} and {}", key, lo, hi);
    }
    *out = v.get<int64_t>();
    return Status();
  };
  int64_t x = 0;
  if (key == "vad_model" || key == "vad_models") return strs(&o->vad_models);
  if (key == "classify_model" || key == "classify_models") return strs(&o->classify_models);
  if (key == "ocr_det") return str(&o->ocr_det);
  if (key == "ocr_rec") return str(&o->ocr_rec);
  if (key == "ocr_keys") return str(&o->ocr_keys);
  if (key == "ocr_id") return str(&o->ocr_id);
  if (key == "onnx_max_running") {
    POWER_RETURN_IF_ERROR(integer(1, 4096, &x));
    o->max_running = static_cast<int>(x);
    return Status();
  }
  if (key == "onnx_max_waiting") {
    POWER_RETURN_IF_ERROR(integer(0, 1 << 20, &x));
    o->max_waiting = static_cast<int>(x);
    return Status();
  }
  if (key == "onnx_budget_bytes") {
    POWER_RETURN_IF_ERROR(integer(0, int64_t{1} << 50, &x));
    o->budget_bytes = static_cast<uint64_t>(x);
    return Status();
  }
  if (key == "onnx_threads") {
    POWER_RETURN_IF_ERROR(integer(1, 4096, &x));
    o->threads = static_cast<int>(x);
    return Status();
  }
  if (key == "onnx_max_batch") {
    POWER_RETURN_IF_ERROR(integer(1, 1024, &x));
    o->max_batch = static_cast<int>(x);
    return Status();
  }
  if (key == "onnx_ocr_max_batch") {
    POWER_RETURN_IF_ERROR(integer(1, 1024, &x));
    o->ocr_max_batch = static_cast<int>(x);
    return Status();
  }
  if (key == "onnx_batch_wait_us") {
    POWER_RETURN_IF_ERROR(integer(0, 1000000, &x));
    o->batch_wait_us = static_cast<int>(x);
    return Status();
  }
  *handled = false;
  return Status();
}

namespace {

constexpr int kRecMaxWidth = 48 * 64;  // PaddleOcr::recognize clamps line widths to this
// The most columns (lines x width) one stacked recognizer run takes: 4 lines of 320 px, 2 of
// 640, wider lines alone. On the 2-vCPU EPYC a line's time grew with the stack (48 x 697 px,
// 1 thread: 22.1 ms alone, 24.0 in a stack of 4, 25.3 in 16; 320 px: level up to 4 lines,
// +3 % at 8), so larger stacks cost more than they share.
constexpr int kOcrStackColumns = 4 * 320;

struct FileInfo {
  std::string role, path, sha256;
  uint64_t bytes = 0;
};

struct Loaded {
  std::string id;
  Task task = Task::kVad;
  std::vector<FileInfo> files;
  std::shared_ptr<const Model> model;  // vad, classify
  // The most items one run stacks: ServiceOptions::max_batch for VAD; for a classifier the same,
  // and for OCR's recognizer (lines) ocr_max_batch, when the stacked form passed the load-time
  // check (batch_model), else 1.
  int max_batch = 1;
  // classify, ocr (the recognizer): loaded with LoadOptions::batch_inputs
  std::shared_ptr<const Model> batch_model;
  std::string batch_note;  // why a classifier or the OCR recognizer runs unbatched
  std::shared_ptr<PaddleOcr> ocr;
  int64_t weight_bytes = 0;
  uint64_t plan_bytes = 0;  // vad / classify: planned peak; ocr: recognizer at its widest line
  json model_json;          // the receipt's "model"
};

Result<FileInfo> file_info(const std::string& role, const std::string& path) {
  FileInfo f;
  f.role = role;
  f.path = path;
  POWER_ASSIGN_OR_RETURN(Sha256Digest d, sha256_file(path));
  f.sha256 = to_hex(d);
  std::error_code ec;
  f.bytes = std::filesystem::file_size(path, ec);
  return f;
}

json model_json_for(const Loaded& m) {
  json files = json::array();
  for (const auto& f : m.files) {
    files.push_back({{"role", f.role},
                     {"name", std::filesystem::path(f.path).filename().string()},
                     {"sha256", f.sha256},
                     {"bytes", f.bytes}});
  }
  return {{"name", m.id},
          {"format", "onnx"},
          {"task", task_name(m.task)},
          {"sha256", m.files.front().sha256},
          {"files", files}};
}

// "[ID=]FILE": the id, and the file or store name.
std::pair<std::string, std::string> split_spec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq != std::string::npos && eq > 0 && spec.substr(0, eq).find('/') == std::string::npos) {
    return {spec.substr(0, eq), spec.substr(eq + 1)};
  }
  return {"", spec};
}

std::string stem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

Status not_input(Status st, const char* what) {
  // Decoding failures are the client's bytes, not the server's state.
  return Status(StatusCode::kInvalidArgument,
                fmt::format("the request body is not a valid {}: {}", what, st.message()));
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Sizes at which a stacked classifier is checked against solo runs: every size up to 16 (where
// kernels switch paths on small row counts), then powers of two, then max_batch itself.
std::vector<int> checked_batch_sizes(int max_batch) {
  std::vector<int> sizes;
  for (int b = 2; b <= std::min(max_batch, 16); ++b) sizes.push_back(b);
  for (int b = 32; b < max_batch; b *= 2) sizes.push_back(b);
  if (max_batch > 16) sizes.push_back(max_batch);
  return sizes;
}

// Loads `path` for stacked inputs and checks that it keeps a batch's images apart: at every
// checked_batch_sizes() size, each of a batch of distinct images (pixels 0..255 from a fixed
// pseudo-random sequence, a batch's members changing from size to size) must get the bits of
// its solo run on `solo`. Returns the stacked model and its peak bytes at max_batch (the larger
// of the plan and the measured run); an error says why the classifier runs unbatched.
Result<std::pair<std::shared_ptr<const Model>, uint64_t>> stacked_classifier(
    const std::string& path, const Model& solo, int max_batch, int threads) {
  LoadOptions lo;
  lo.batch_inputs = true;
  POWER_ASSIGN_OR_RETURN(std::shared_ptr<const Model> stacked, Model::load_file(path, lo));
  std::vector<std::vector<float>> images(static_cast<size_t>(max_batch));
  uint32_t seed = 0x9e3779b9u;
  for (auto& px : images) {
    px.resize(28 * 28);
    for (float& v : px) {
      seed = seed * 1664525u + 1013904223u;
      v = static_cast<float>(seed >> 24);
    }
  }
  std::vector<MnistResult> alone;
  for (const auto& px : images) {
    POWER_ASSIGN_OR_RETURN(std::vector<MnistResult> r, mnist_classify_batch(solo, {&px}));
    alone.push_back(std::move(r[0]));
  }
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
  int64_t peak = 0;
  for (const int b : checked_batch_sizes(max_batch)) {
    std::vector<const std::vector<float>*> px;
    std::vector<size_t> which;
    for (int i = 0; i < b; ++i) {
      which.push_back((static_cast<size_t>(b) * 7 + i) % images.size());
      px.push_back(&images[which.back()]);
    }
    RunStats run_stats;
    POWER_ASSIGN_OR_RETURN(std::vector<MnistResult> rs,
                           mnist_classify_batch(*stacked, px, pool.get(), &run_stats));
    for (int i = 0; i < b; ++i) {
      const std::vector<float>& want = alone[which[i]].logits;
      if (rs[i].logits.size() != want.size() ||
          std::memcmp(rs[i].logits.data(), want.data(), want.size() * sizeof(float)) != 0) {
        return make_error(StatusCode::kUnsupported,
                          "in a batch of {}, image {} does not get the scores it gets alone", b, i);
      }
    }
    if (b == max_batch) {  // the full batch's peak: the larger of the plan and this run
      POWER_ASSIGN_OR_RETURN(MemoryPlan plan, stacked->plan_memory({{b, 1, 28, 28}}));
      peak = std::max(plan.peak_bytes, run_stats.peak_bytes);
    }
  }
  return std::make_pair(std::move(stacked), static_cast<uint64_t>(peak));
}

// The OCR recognizer loaded for stacked lines, checked like stacked_classifier: distinct
// pseudo-random lines 320 px wide (the padded width every short line gets) and 416 px wide, in
// every batch size a run can have at that width (2 up to kOcrStackColumns / width and
// max_batch), members changing from size to size, must each get the class scores of their solo
// run, bit for bit.
Result<std::shared_ptr<const Model>> stacked_recognizer(const PaddleOcr& ocr, int max_batch,
                                                        int threads) {
  POWER_ASSIGN_OR_RETURN(std::shared_ptr<const Model> stacked, ocr.load_stacked_recognizer());
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
  uint32_t seed = 0x85ebca6bu;
  for (const int64_t W : {int64_t{320}, int64_t{416}}) {
    std::vector<int> sizes;
    for (int b = 2; b <= std::min<int64_t>(max_batch, kOcrStackColumns / W); ++b)
      sizes.push_back(b);
    if (sizes.empty()) continue;
    const int n = sizes.back();
    std::vector<std::vector<float>> lines;
    std::vector<Tensor> alone;  // each line's class scores [1, T, C] from the recognizer as loaded
    for (int i = 0; i < n; ++i) {
      std::vector<float> v(static_cast<size_t>(3 * 48 * W));
      for (float& x : v) {
        seed = seed * 1664525u + 1013904223u;
        x = static_cast<float>(seed >> 24) / 127.5f - 1.0f;  // the recognizer's input range
      }
      POWER_ASSIGN_OR_RETURN(auto r, ocr.rec_model().run({make_f32({1, 3, 48, W}, v)}, pool.get()));
      lines.push_back(std::move(v));
      alone.push_back(std::move(r[0]));
    }
    for (const int b : sizes) {
      std::vector<float> x;
      std::vector<size_t> which;
      for (int i = 0; i < b; ++i) {
        which.push_back((static_cast<size_t>(b) * 5 + static_cast<size_t>(i)) % lines.size());
        x.insert(x.end(), lines[which.back()].begin(), lines[which.back()].end());
      }
      POWER_ASSIGN_OR_RETURN(auto out,
                             stacked->run({make_f32({b, 3, 48, W}, std::move(x))}, pool.get()));
      for (int i = 0; i < b; ++i) {
        const Tensor& want = alone[which[static_cast<size_t>(i)]];
        const int64_t per = want.numel();
        if (out[0].rank() != 3 || out[0].shape[0] != b || out[0].numel() != per * b ||
            std::memcmp(out[0].data<float>() + i * per, want.data<float>(),
                        static_cast<size_t>(per) * sizeof(float)) != 0) {
          return make_error(StatusCode::kUnsupported,
                            "in a batch of {} lines {} px wide, line {} does not get the scores "
                            "it gets alone",
                            b, W, i);
        }
      }
    }
  }
  return stacked;
}

}  // namespace

struct Service::Impl {
  ServiceOptions opts;
  std::vector<Loaded> models;
  std::unique_ptr<runtime::Admission> admission;
  std::shared_ptr<const receipt::SigningKey> key;

  mutable std::mutex mu;       // admission, slots, batched items, waiting, stats, key, det plans
  std::condition_variable cv;  // memory released, a slot freed (reserve, acquire_slot)
  int waiting = 0;
  // Compute slots: at most opts.max_running executions at once, each with its own pool (made
  // on first use) when opts.threads > 1.
  std::vector<char> slot_busy;
  std::vector<std::unique_ptr<ThreadPool>> slot_pools;
  int slots_used = 0;
  // Executions waiting in acquire_slot: a batched VAD step leaves freed slots to them, so a
  // long VAD request gives way between windows instead of holding its slot to the end.
  int slot_waiters = 0;
  // Items between batched steps (VAD streams, classify images), by model, with the key that
  // a batch's items share (a VAD stream's sample rate) and a ticket: the order in which they
  // became ready. All items of a model have one type. Each request's thread waits on its own
  // condition variable (`wake`), notified only when its item's step ended in a result or an
  // error, or when its item is the oldest ready one and may lead the next step (wake_oldest):
  // waking every waiter at every step would cost more than a small model's run.
  struct ReadyItem {
    void* item;
    int key;
    uint64_t ticket;
    std::chrono::steady_clock::time_point since;
    std::condition_variable* wake;
  };
  std::map<const Loaded*, std::deque<ReadyItem>> ready_items;
  uint64_t next_ticket = 0;
  std::set<const void*> stepping;               // in a step now
  std::map<const void*, Status> step_failures;  // items whose last step failed
  int vad_streams = 0;

  // Under mu, with a slot free: takes it and returns its index.
  int take_slot() {
    for (size_t i = 0; i < slot_busy.size(); ++i) {
      if (!slot_busy[i]) {
        slot_busy[i] = 1;
        ++slots_used;
        return static_cast<int>(i);
      }
    }
    POWER_CHECK(false);
    return -1;
  }

  ThreadPool* slot_pool(int slot) {  // the slot's owner only
    if (opts.threads <= 1) return nullptr;
    if (!slot_pools[slot]) slot_pools[slot] = std::make_unique<ThreadPool>(opts.threads);
    return slot_pools[slot].get();
  }

  // Under mu: the longest-waiting ready item of any model, with its model; null when none.
  std::pair<const ReadyItem*, const Loaded*> oldest_ready() const {
    const ReadyItem* oldest = nullptr;
    const Loaded* model = nullptr;
    for (const auto& [m, q] : ready_items) {
      if (!q.empty() && (oldest == nullptr || q.front().ticket < oldest->ticket)) {
        oldest = &q.front();
        model = m;
      }
    }
    return {oldest, model};
  }

  // Under mu: a slot freed or the oldest ready item changed; its thread may lead a step.
  void wake_oldest() {
    if (const ReadyItem* o = oldest_ready().first) o->wake->notify_one();
  }

  // Under mu.
  void put_slot(int slot) {
    slot_busy[slot] = 0;
    --slots_used;
    wake_oldest();
  }

  void free_slot(int slot) {
    {
      std::lock_guard<std::mutex> lk(mu);
      put_slot(slot);
    }
    cv.notify_all();
  }

  // Waits for a compute slot like reserve() waits for memory.
  Result<int> acquire_slot(const std::string& id,
                           const std::optional<std::chrono::steady_clock::time_point>& deadline) {
    std::unique_lock<std::mutex> lk(mu);
    const int max = static_cast<int>(slot_busy.size());
    if (slots_used < max) return take_slot();
    if (waiting >= opts.max_waiting) {
      stats[id].rejections["queue_full"]++;
      return Status(StatusCode::kQueueFull,
                    fmt::format("{} ONNX executions are already waiting", waiting));
    }
    ++waiting;
    ++slot_waiters;
    auto free = [&] { return slots_used < max; };
    bool got = true;
    if (deadline) {
      got = cv.wait_until(lk, *deadline, free);
    } else {
      cv.wait(lk, free);
    }
    --waiting;
    --slot_waiters;
    if (!got) {
      wake_oldest();  // one waiter fewer for the batched steps to give way to
      stats[id].rejections["deadline"]++;
      return Status(StatusCode::kDeadlineExceeded, "waited for a compute slot until the deadline");
    }
    return take_slot();
  }

  // Runs `mine` in steps batched with the other ready items of model m and the same key until
  // done(mine) (service.h "Microbatching"): step(batch, pool) runs one step of each item of
  // the batch, `mine` first. Between steps an item is in ready_items; during one it is in
  // `stepping` and only the step's leader touches it. A step stacks at most `limit` items (0:
  // m.max_batch). Its leader takes an even share of the ready items per free slot, so that
  // slots which are free now get work too; with `heavy` (items of tens of milliseconds: OCR
  // lines) per slot of any state, so that a slot freed while a long step runs finds some.
  // Steps count in the model's batch_sizes unless `counted` is false.
  template <class Item, class Step, class Done>
  Status run_batched(const Loaded& m, Item* mine, int key, const Step& step, const Done& done,
                     size_t limit = 0, bool heavy = false, bool counted = true) {
    size_t max_batch = static_cast<size_t>(std::max(1, m.max_batch));
    if (limit > 0) max_batch = std::min(max_batch, limit);
    const int max_slots = static_cast<int>(slot_busy.size());
    std::unique_lock<std::mutex> lk(mu);
    std::deque<ReadyItem>& ready = ready_items[&m];
    auto find_mine = [&] {
      return std::find_if(ready.begin(), ready.end(),
                          [&](const ReadyItem& r) { return r.item == mine; });
    };
    // The longest-waiting ready item of any model when it is one this thread may step with
    // its own (the same model and key), else null. So models take turns (a long VAD request
    // does not keep the slots from a classify request), while one thread can lead step after
    // step of one model.
    auto my_turn = [&]() -> const ReadyItem* {
      auto [oldest, model] = oldest_ready();
      return model == &m && oldest->key == key ? oldest : nullptr;
    };
    const auto batch_wait = std::chrono::microseconds(opts.batch_wait_us);
    auto now = [] { return std::chrono::steady_clock::now(); };
    std::condition_variable wake;
    ready.push_back({mine, key, next_ticket++, now(), &wake});
    // The oldest item's thread leads when a slot is free; with a batch wait, it also counts
    // the arrivals.
    wake_oldest();
    if (m.task == Task::kVad) ++vad_streams;
    Status failed;
    while (true) {
      // Wait until failed, finished (neither queued nor in a step), or ready with a slot free,
      // its model's turn and, with a batch wait, a full batch or the oldest item waited out.
      if (auto f = step_failures.find(mine); f != step_failures.end()) {
        failed = f->second;
        step_failures.erase(f);
        break;
      }
      if (stepping.count(mine) != 0) {
        wake.wait(lk);
        continue;
      }
      auto at = find_mine();
      if (at == ready.end()) break;
      const ReadyItem* oldest = slots_used + slot_waiters < max_slots ? my_turn() : nullptr;
      if (oldest == nullptr) {
        wake.wait(lk);
        continue;
      }
      size_t same = 0;
      for (const ReadyItem& r : ready) same += r.key == key;
      if (batch_wait.count() > 0 && same < max_batch && now() < oldest->since + batch_wait) {
        // The oldest item's thread is woken by arrivals; another thread of the same model may
        // be here too, and leads when its own wait ends first.
        wake.wait_until(lk, oldest->since + batch_wait);
        continue;
      }
      // Lead a step: this item and others of its key, at most an even share of the ready
      // items per free slot (per slot when heavy) so that the other slots get work too.
      const int slot = take_slot();
      const size_t shares = static_cast<size_t>(heavy ? max_slots : max_slots - slots_used + 1);
      const size_t n = std::min(max_batch, (same + shares - 1) / shares);
      std::vector<Item*> batch = {mine};
      std::vector<std::condition_variable*> wakes = {&wake};
      ready.erase(at);
      for (auto it = ready.begin(); it != ready.end() && batch.size() < n;) {
        if (it->key == key) {
          batch.push_back(static_cast<Item*>(it->item));
          wakes.push_back(it->wake);
          it = ready.erase(it);
        } else {
          ++it;
        }
      }
      for (Item* s : batch) stepping.insert(s);
      if (slots_used + slot_waiters < max_slots) wake_oldest();  // a free slot for the rest
      lk.unlock();
      const Status st = step(batch, slot_pool(slot));
      lk.lock();
      if (counted) stats[m.id].batch_sizes[static_cast<int>(batch.size())]++;
      for (size_t i = 0; i < batch.size(); ++i) {
        Item* s = batch[i];
        stepping.erase(s);
        if (!st.ok()) {
          step_failures[s] = st;
          wakes[i]->notify_one();
        } else if (done(*s)) {
          wakes[i]->notify_one();
        } else {
          ready.push_back({s, key, next_ticket++, now(), wakes[i]});
        }
      }
      put_slot(slot);  // wakes the oldest ready item's thread
      if (slot_waiters > 0) cv.notify_all();
    }
    if (m.task == Task::kVad) --vad_streams;
    return failed;
  }

  // A VAD request's probabilities, its windows stacked into batches with the windows of other
  // requests to the same model.
  Result<std::vector<float>> vad_batched(const Loaded& m, const std::vector<float>& samples,
                                         int sample_rate) {
    const SileroVad vad(m.model);
    POWER_ASSIGN_OR_RETURN(VadStream mine, SileroVad::start(samples, sample_rate));
    if (mine.finished()) return std::vector<float>();
    POWER_RETURN_IF_ERROR(run_batched(
        m, &mine, sample_rate,
        [&](std::vector<VadStream*>& batch, ThreadPool* pool) { return vad.step(batch, pool); },
        [](const VadStream& s) { return s.finished(); }));
    return std::move(mine.probs);
  }

  // A classify request's result, its image stacked into one run with the images of other
  // requests to the same model (m.batch_model, checked against solo runs at load).
  Result<MnistResult> classify_batched(const Loaded& m, std::vector<float> pixels) {
    struct Item {
      std::vector<float> pixels;
      MnistResult result;
      bool done = false;
    };
    Item mine{std::move(pixels), {}, false};
    POWER_RETURN_IF_ERROR(run_batched(
        m, &mine, 0,
        [&](std::vector<Item*>& batch, ThreadPool* pool) -> Status {
          std::vector<const std::vector<float>*> px;
          for (const Item* it : batch) px.push_back(&it->pixels);
          POWER_ASSIGN_OR_RETURN(
              std::vector<MnistResult> rs,
              mnist_classify_batch(batch.size() == 1 ? *m.model : *m.batch_model, px, pool));
          for (size_t i = 0; i < batch.size(); ++i) {
            batch[i]->result = std::move(rs[i]);
            batch[i]->done = true;
          }
          return Status();
        },
        [](const Item& it) { return it.done; }));
    return std::move(mine.result);
  }
  // An OCR request's lines. Unbatched (`pool`: the request's slot's): detection and each line
  // on that slot, as PaddleOcr::run. Batched (m.max_batch > 1, no slot held): the detection is a
  // one-item step in the same queue as the lines (key -1, not counted in batch_sizes), so
  // detections and lines take the slots oldest first and neither can starve the other; then
  // each line in turn is an item stacked with the ready lines of the same padded width of other
  // requests (key = width) on m.batch_model. The recognizer runs are counted in batch_sizes by
  // their lines.
  Result<std::vector<OcrLine>> ocr_lines(const Loaded& m, const Image& image, const OcrOptions& oo,
                                         ThreadPool* pool) {
    const PaddleOcr& ocr = *m.ocr;
    const bool batched = m.max_batch > 1;
    std::vector<OcrLine> boxes;
    if (batched) {
      struct DetItem {
        const Image* image;
        const OcrOptions* opts;
        std::vector<OcrLine> boxes;
        bool done = false;
      };
      DetItem d{&image, &oo, {}, false};
      POWER_RETURN_IF_ERROR(run_batched(
          m, &d, -1,
          [&](std::vector<DetItem*>& batch, ThreadPool* step_pool) -> Status {
            for (DetItem* it : batch) {
              POWER_ASSIGN_OR_RETURN(it->boxes, ocr.detect(*it->image, *it->opts, step_pool));
              it->done = true;
            }
            return Status();
          },
          [](const DetItem& it) { return it.done; }, 1, true, false));
      boxes = std::move(d.boxes);
    } else {
      POWER_ASSIGN_OR_RETURN(boxes, ocr.detect(image, oo, pool));
    }
    struct Item {
      Tensor input;
      OcrLine result;
      bool done = false;
    };
    std::vector<OcrLine> out;
    for (const OcrLine& b : boxes) {
      POWER_ASSIGN_OR_RETURN(Tensor x, ocr.box_input(image, b.box));
      OcrLine line;
      if (batched) {
        Item mine{std::move(x), {}, false};
        const int width = static_cast<int>(mine.input.shape[3]);
        POWER_RETURN_IF_ERROR(run_batched(
            m, &mine, width,
            [&](std::vector<Item*>& batch, ThreadPool* step_pool) -> Status {
              std::vector<const Tensor*> xs;
              for (const Item* it : batch) xs.push_back(&it->input);
              POWER_ASSIGN_OR_RETURN(std::vector<OcrLine> rs,
                                     ocr.recognize_lines(xs, m.batch_model.get(), step_pool));
              for (size_t i = 0; i < batch.size(); ++i) {
                batch[i]->result = std::move(rs[i]);
                batch[i]->done = true;
              }
              return Status();
            },
            [](const Item& it) { return it.done; },
            static_cast<size_t>(std::max(1, kOcrStackColumns / width)), true));
        line = std::move(mine.result);
      } else {
        POWER_ASSIGN_OR_RETURN(std::vector<OcrLine> rs, ocr.recognize_lines({&x}, nullptr, pool));
        line = std::move(rs[0]);
        std::lock_guard<std::mutex> lk(mu);
        stats[m.id].batch_sizes[1]++;
      }
      if (!PaddleOcr::keep(line, oo)) continue;
      line.box = b.box;
      out.push_back(std::move(line));
    }
    return out;
  }

  std::map<std::string, ServiceStats::PerModel> stats;
  std::map<std::pair<int64_t, int64_t>, uint64_t> det_plans;  // (h, w) -> planned peak

  const Loaded* find(Task task, const std::string& id) const {
    const Loaded* only = nullptr;
    int n = 0;
    for (const auto& m : models) {
      if (m.task != task) continue;
      if (!id.empty() && m.id == id) return &m;
      only = &m;
      ++n;
    }
    return id.empty() && n == 1 ? only : nullptr;
  }

  void count_rejection(const std::string& id, const std::string& why) {
    std::lock_guard<std::mutex> lk(mu);
    stats[id].rejections[why]++;
  }

  Result<uint64_t> det_plan(const PaddleOcr& ocr, int64_t h, int64_t w) {
    {
      std::lock_guard<std::mutex> lk(mu);
      auto it = det_plans.find({h, w});
      if (it != det_plans.end()) return it->second;
    }
    POWER_ASSIGN_OR_RETURN(MemoryPlan p, ocr.det_model()->plan_memory({{1, 3, h, w}}));
    if (!p.complete()) {
      return make_error(StatusCode::kInternal, "the detector's memory plan for {}x{} is incomplete",
                        w, h);
    }
    const uint64_t bytes = static_cast<uint64_t>(p.peak_bytes);
    std::lock_guard<std::mutex> lk(mu);
    if (det_plans.size() > 256) det_plans.clear();
    det_plans[{h, w}] = bytes;
    return bytes;
  }

  // Takes `bytes` from the budget, waiting until the deadline when it does not fit now.
  Status reserve(const std::string& id, uint64_t bytes,
                 const std::optional<std::chrono::steady_clock::time_point>& deadline) {
    runtime::MemoryPlan plan;
    plan.scratch_bytes = bytes;
    std::unique_lock<std::mutex> lk(mu);
    Status ever = admission->check_ever(plan);
    if (!ever.ok()) {
      stats[id].rejections["does_not_fit"]++;
      return Status(StatusCode::kDoesNotFit,
                    fmt::format("this input needs {} bytes; the ONNX budget is {} bytes", bytes,
                                admission->limits().budget_bytes));
    }
    if (admission->reserve(plan)) return Status();
    if (waiting >= opts.max_waiting) {
      stats[id].rejections["queue_full"]++;
      return Status(StatusCode::kQueueFull,
                    fmt::format("{} ONNX executions are already waiting for memory", waiting));
    }
    ++waiting;
    bool got = false;
    auto try_reserve = [&] { return admission->reserve(plan); };
    if (deadline) {
      got = cv.wait_until(lk, *deadline, try_reserve);
    } else {
      cv.wait(lk, try_reserve);
      got = true;
    }
    --waiting;
    if (!got) {
      stats[id].rejections["deadline"]++;
      return Status(
          StatusCode::kDeadlineExceeded,
          fmt::format("waited for {} bytes of the ONNX budget until the deadline", bytes));
    }
    return Status();
  }

  void release(uint64_t bytes) {
    runtime::MemoryPlan plan;
    plan.scratch_bytes = bytes;
    {
      std::lock_guard<std::mutex> lk(mu);
      admission->release(plan);
    }
    cv.notify_all();
  }

  Result<std::shared_ptr<const receipt::SigningKey>> signing_key() {
    std::lock_guard<std::mutex> lk(mu);
    if (!key) {
      POWER_ASSIGN_OR_RETURN(
          std::unique_ptr<receipt::SigningKey> k,
          receipt::SigningKey::load_or_create(
              opts.keys_dir.empty() ? receipt::SigningKey::default_dir() : opts.keys_dir));
      key = std::move(k);
    }
    return key;
  }
};

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Service::~Service() = default;

Result<std::unique_ptr<Service>> Service::create(
    const ServiceOptions& options,
    const std::function<Result<std::string>(const std::string&)>& resolve) {
  auto impl = std::make_unique<Impl>();
  impl->opts = options;
  auto path_of = [&](const std::string& name) -> Result<std::string> {
    if (resolve) return resolve(name);
    return name;
  };
  std::set<std::pair<int, std::string>> ids;
  auto add = [&](Loaded m) -> Status {
    if (!ids.insert({static_cast<int>(m.task), m.id}).second) {
      return make_error(StatusCode::kInvalidArgument, "two {} models have the id '{}'",
                        task_name(m.task), m.id);
    }
    m.model_json = model_json_for(m);
    impl->models.push_back(std::move(m));
    return Status();
  };
  for (const auto& spec : options.vad_models) {
    auto [id, name] = split_spec(spec);
    POWER_ASSIGN_OR_RETURN(std::string path, path_of(name));
    Loaded m;
    m.id = id.empty() ? stem(path) : id;
    m.task = Task::kVad;
    m.max_batch = std::max(1, options.max_batch);
    auto vad = SileroVad::load(path);
    if (!vad.ok()) return std::move(vad).take_status().with("vad_model", spec);
    m.model = Model::load_file(path).value();  // loaded above, cannot fail now
    POWER_ASSIGN_OR_RETURN(FileInfo f, file_info("model", path));
    m.files.push_back(f);
    m.weight_bytes = m.model->weight_bytes();
    // Silero's If hides shapes from shape inference (the plan is a lower bound), so the
    // window's peak is also measured once here on silence; the larger of the two is used. With
    // microbatching, a stream reserves the larger of one window's peak and its share of a full
    // batch's: a batch's peak grows about linearly with its size (a fixed part plus a part per
    // window), so B streams' reservations cover any batch of B.
    const Graph& g = m.model->graph();
    for (const int64_t batch : {int64_t{1}, static_cast<int64_t>(std::max(1, options.max_batch))}) {
      std::vector<Shape> shapes;
      std::vector<Tensor> in;
      for (const auto& v : g.input_info) {
        if (v.name == "input") {
          shapes.push_back({batch, 576});
          in.push_back(make_f32({batch, 576}, std::vector<float>(576 * batch, 0.0f)));
        } else if (v.name == "state") {
          shapes.push_back({2, batch, 128});
          in.push_back(make_f32({2, batch, 128}, std::vector<float>(256 * batch, 0.0f)));
        } else {
          shapes.push_back({});
          in.push_back(scalar_i64(16000));
        }
      }
      POWER_ASSIGN_OR_RETURN(MemoryPlan plan, m.model->plan_memory(shapes));
      RunStats rs;
      POWER_ASSIGN_OR_RETURN(auto out, m.model->run(in, nullptr, &rs));
      (void)out;
      const uint64_t peak = static_cast<uint64_t>(std::max(plan.peak_bytes, rs.peak_bytes));
      m.plan_bytes = std::max(m.plan_bytes, (peak + static_cast<uint64_t>(batch) - 1) / batch);
    }
    POWER_RETURN_IF_ERROR(add(std::move(m)));
  }
  for (const auto& spec : options.classify_models) {
    auto [id, name] = split_spec(spec);
    POWER_ASSIGN_OR_RETURN(std::string path, path_of(name));
    Loaded m;
    m.id = id.empty() ? stem(path) : id;
    m.task = Task::kClassify;
    auto model = Model::load_file(path);
    if (!model.ok()) return std::move(model).take_status().with("classify_model", spec);
    m.model = *model;
    const Graph& g = m.model->graph();
    if (g.inputs.size() != 1 || g.outputs.size() != 1) {
      return make_error(StatusCode::kInvalidArgument,
                        "{}: a classifier has one input and one output", spec);
    }
    POWER_ASSIGN_OR_RETURN(FileInfo f, file_info("model", path));
    m.files.push_back(f);
    m.weight_bytes = m.model->weight_bytes();
    POWER_ASSIGN_OR_RETURN(MemoryPlan plan, m.model->plan_memory({{1, 1, 28, 28}}));
    m.plan_bytes = static_cast<uint64_t>(plan.peak_bytes);
    // Microbatching, when the stacked graph passes its check; a request then reserves the
    // larger of its solo peak and its share of a full batch's peak.
    if (options.max_batch > 1) {
      auto stacked = stacked_classifier(path, *m.model, options.max_batch, options.threads);
      if (stacked.ok()) {
        m.batch_model = std::move(stacked->first);
        m.max_batch = options.max_batch;
        const uint64_t b = static_cast<uint64_t>(options.max_batch);
        m.plan_bytes = std::max(m.plan_bytes, (stacked->second + b - 1) / b);
      } else {
        m.batch_note = stacked.status().message();
        POWER_LOG_WARN("classifier '{}' runs unbatched: {}", m.id, m.batch_note);
      }
    }
    POWER_RETURN_IF_ERROR(add(std::move(m)));
  }
  if (!options.ocr_det.empty() || !options.ocr_rec.empty() || !options.ocr_keys.empty()) {
    if (options.ocr_det.empty() || options.ocr_rec.empty() || options.ocr_keys.empty()) {
      return make_error(StatusCode::kInvalidArgument,
                        "OCR needs all of --ocr-det, --ocr-rec and --ocr-keys");
    }
    POWER_ASSIGN_OR_RETURN(std::string det, path_of(options.ocr_det));
    POWER_ASSIGN_OR_RETURN(std::string rec, path_of(options.ocr_rec));
    auto ocr = PaddleOcr::load(det, rec, options.ocr_keys);
    if (!ocr.ok()) return ocr.status();
    Loaded m;
    m.id = options.ocr_id.empty() ? "paddleocr" : options.ocr_id;
    m.task = Task::kOcr;
    m.ocr = std::make_shared<PaddleOcr>(std::move(*ocr));
    POWER_ASSIGN_OR_RETURN(FileInfo fd, file_info("det", det));
    POWER_ASSIGN_OR_RETURN(FileInfo fr, file_info("rec", rec));
    POWER_ASSIGN_OR_RETURN(FileInfo fk, file_info("keys", options.ocr_keys));
    m.files = {fd, fr, fk};
    m.weight_bytes = m.ocr->det_model()->weight_bytes() + m.ocr->rec_model().weight_bytes();
    // The recognizer's plan leaves some shapes unknown (a lower bound), so its peak at the
    // widest line is also measured once here; the larger of the two is used.
    const Model& rec_model = m.ocr->rec_model();
    POWER_ASSIGN_OR_RETURN(MemoryPlan plan, rec_model.plan_memory({{1, 3, 48, kRecMaxWidth}}));
    int64_t measured = 0;
    if (!plan.complete()) {
      RunStats rs;
      POWER_ASSIGN_OR_RETURN(
          auto out,
          rec_model.run({make_f32({1, 3, 48, kRecMaxWidth},
                                  std::vector<float>(size_t{3} * 48 * kRecMaxWidth, 0.0f))},
                        nullptr, &rs));
      (void)out;
      measured = rs.peak_bytes;
    }
    m.plan_bytes = static_cast<uint64_t>(std::max(plan.peak_bytes, measured));
    // Stacked lines, when the stacked recognizer passes its check. A stack holds at most
    // kOcrStackColumns (1,280) columns of lines, and every request in it has reserved the peak
    // of one line of kRecMaxWidth (3,072) columns: more than any whole stack needs (PP-OCRv4
    // rec, measured: 8.5 MB for 4 x 320 or 2 x 640 columns, 20.4 MB for one line of 3,072).
    if (options.ocr_max_batch > 1) {
      auto stacked = stacked_recognizer(*m.ocr, options.ocr_max_batch, options.threads);
      if (stacked.ok()) {
        m.batch_model = std::move(*stacked);
        m.max_batch = options.ocr_max_batch;
      } else {
        m.batch_note = stacked.status().message();
        POWER_LOG_WARN("OCR recognizer '{}' runs unbatched: {}", m.id, m.batch_note);
      }
    }
    POWER_RETURN_IF_ERROR(add(std::move(m)));
  }
  runtime::AdmissionLimits limits;
  // Memory only: the compute slots bound the executions at once.
  limits.max_running = std::numeric_limits<int>::max();
  impl->slot_busy.assign(static_cast<size_t>(std::max(1, options.max_running)), 0);
  impl->slot_pools.resize(impl->slot_busy.size());
  limits.kv_pool_blocks = 0;
  if (options.budget_bytes > 0) {
    limits.budget_bytes = options.budget_bytes;
  } else {
    uint64_t weights = 0;
    for (const auto& m : impl->models) weights += static_cast<uint64_t>(m.weight_bytes);
    const uint64_t device = default_memory_budget_bytes();
    limits.budget_bytes = device > weights ? device - weights : 0;
  }
  impl->admission = std::make_unique<runtime::Admission>(limits);
  for (const auto& m : impl->models) impl->stats[m.id];
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

std::vector<ServiceModelInfo> Service::models() const {
  std::vector<ServiceModelInfo> out;
  for (const auto& m : impl_->models) {
    ServiceModelInfo i;
    i.id = m.id;
    i.task = m.task;
    for (const auto& f : m.files) i.files.push_back(f.path);
    i.weight_bytes = m.weight_bytes;
    i.max_batch = m.max_batch;
    i.batch_note = m.batch_note;
    out.push_back(std::move(i));
  }
  return out;
}

ServiceStats Service::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  ServiceStats s;
  s.models = impl_->stats;
  s.running = impl_->slots_used;
  s.waiting = impl_->waiting;
  s.streams = impl_->vad_streams;
  s.reserved_bytes = impl_->admission->reserved_bytes();
  s.budget_bytes = impl_->admission->limits().budget_bytes;
  return s;
}

Result<ExecResult> Service::execute(const ExecRequest& req) {
  Impl& im = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  const Loaded* m = im.find(req.task, req.model);
  if (m == nullptr) {
    std::vector<std::string> have;
    for (const auto& x : im.models) {
      if (x.task == req.task) have.push_back(x.id);
    }
    if (req.model.empty() && have.size() > 1) {
      return make_error(StatusCode::kInvalidArgument,
                        "several {} models are loaded ({}): name one with 'model'",
                        task_name(req.task), fmt::join(have, ", "));
    }
    return make_error(
        StatusCode::kNotFound, "the {} model '{}' is not loaded (loaded: {})", task_name(req.task),
        req.model, have.empty() ? std::string("none") : fmt::format("{}", fmt::join(have, ", ")));
  }
  if (req.input.size() > im.opts.max_input_bytes) {
    im.count_rejection(m->id, "invalid_input");
    return make_error(StatusCode::kInvalidArgument, "the input is {} bytes; at most {} are taken",
                      req.input.size(), im.opts.max_input_bytes);
  }
  std::shared_ptr<const receipt::SigningKey> key;
  if (req.want_receipt) {
    POWER_ASSIGN_OR_RETURN(key, im.signing_key());
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(req.input.data());
  json input_info;
  // Decode (the client's bytes), then what the execution will hold at its peak.
  Audio audio;
  Image image;
  uint64_t need = 0;
  if (req.task == Task::kVad) {
    if (!(req.vad.threshold > 0 && req.vad.threshold < 1)) {
      return make_error(StatusCode::kInvalidArgument, "threshold must be in (0, 1)");
    }
    auto a = decode_audio(bytes, req.input.size());
    if (!a.ok()) {
      im.count_rejection(m->id, "invalid_input");
      return not_input(a.status(), "mono WAV file");
    }
    audio = std::move(*a);
    if (audio.sample_rate != 16000 && audio.sample_rate != 8000) {
      im.count_rejection(m->id, "invalid_input");
      return make_error(StatusCode::kInvalidArgument,
                        "Silero VAD needs 16000 or 8000 Hz audio, got {} Hz", audio.sample_rate);
    }
    const uint64_t windows = audio.samples.size() / 256 + 1;
    need = m->plan_bytes + (576 + 256) * sizeof(float) * 2 + windows * sizeof(float);
    input_info = {
        {"kind", "audio"}, {"sample_rate", audio.sample_rate}, {"samples", audio.samples.size()}};
  } else {
    auto img = decode_image(bytes, req.input.size(), req.task == Task::kOcr ? 3 : 1);
    if (!img.ok()) {
      im.count_rejection(m->id, "invalid_input");
      return not_input(img.status(), "image (PNG, JPEG, BMP, PNM, TIFF)");
    }
    image = std::move(*img);
    input_info = {{"kind", "image"}, {"width", image.width}, {"height", image.height}};
    if (req.task == Task::kClassify) {
      if (image.width != 28 || image.height != 28) {
        im.count_rejection(m->id, "invalid_input");
        return make_error(StatusCode::kInvalidArgument,
                          "the classifier needs a 28x28 image, got {}x{}", image.width,
                          image.height);
      }
      need = m->plan_bytes + 28 * 28 * sizeof(float) + 10 * sizeof(float);
    } else {
      // Detection input as PaddleOcr::detect sizes it.
      const int H = image.height, W = image.width;
      const double ratio = std::max(H, W) > 960 ? 960.0 / std::max(H, W) : 1.0;
      const int64_t rh = std::max(static_cast<int>(std::lround(H * ratio / 32.0)) * 32, 32);
      const int64_t rw = std::max(static_cast<int>(std::lround(W * ratio / 32.0)) * 32, 32);
      auto dp = im.det_plan(*m->ocr, rh, rw);
      if (!dp.ok()) return dp.status();
      const uint64_t det = *dp + rh * rw * (3 * sizeof(float) + 3 + sizeof(int) + 1);
      const uint64_t rec = m->plan_bytes + uint64_t{48} * kRecMaxWidth * 3 * (sizeof(float) + 1);
      need = std::max(det, rec) + static_cast<uint64_t>(image.width) * image.height * 3;
    }
  }
  const auto t_decoded = std::chrono::steady_clock::now();
  POWER_RETURN_IF_ERROR(im.reserve(m->id, need, req.deadline));
  // A batched request takes a slot per step (run_batched); the others hold one throughout.
  const bool batched = m->max_batch > 1;
  int slot = -1;
  if (!batched) {
    auto s = im.acquire_slot(m->id, req.deadline);
    if (!s.ok()) {
      im.release(need);
      return s.status();
    }
    slot = *s;
  }
  const auto t_admitted = std::chrono::steady_clock::now();
  ThreadPool* pool = slot >= 0 ? im.slot_pool(slot) : nullptr;
  ExecResult out;
  out.model = m->id;
  out.reserved_bytes = need;
  Status run_status;
  json options;
  if (req.task == Task::kVad) {
    SileroVad vad(m->model);
    auto probs = batched ? im.vad_batched(*m, audio.samples, audio.sample_rate)
                         : vad.probabilities(audio.samples, audio.sample_rate, pool);
    if (probs.ok() && !batched && !probs->empty()) {
      std::lock_guard<std::mutex> lk(im.mu);
      im.stats[m->id].batch_sizes[1] += probs->size();
    }
    if (probs.ok()) {
      auto segs = speech_segments(*probs, static_cast<int64_t>(audio.samples.size()),
                                  audio.sample_rate, req.vad);
      out.result = vad_json(*probs, segs, audio.sample_rate);
    } else {
      run_status = probs.status();
    }
    options = {{"threshold", static_cast<double>(req.vad.threshold)},
               {"min_speech_ms", req.vad.min_speech_ms},
               {"min_silence_ms", req.vad.min_silence_ms},
               {"speech_pad_ms", req.vad.speech_pad_ms}};
  } else if (req.task == Task::kClassify) {
    auto classify = [&]() -> Result<MnistResult> {
      if (!batched) return mnist_classify(*m->model, image, pool);
      POWER_ASSIGN_OR_RETURN(std::vector<float> px, mnist_pixels(image));
      return im.classify_batched(*m, std::move(px));
    };
    auto r = classify();
    if (r.ok() && !batched) {
      std::lock_guard<std::mutex> lk(im.mu);
      im.stats[m->id].batch_sizes[1]++;
    }
    if (r.ok()) {
      out.result = classify_json(r->digit, r->logits);
    } else {
      run_status = r.status();
    }
  } else {
    OcrOptions oo;
    auto r = im.ocr_lines(*m, image, oo, pool);
    if (r.ok()) {
      out.result = ocr_json(*r);
    } else {
      run_status = r.status();
    }
    options = {{"det_limit_side", oo.det_limit_side},
               {"det_threshold", static_cast<double>(oo.det_threshold)},
               {"box_threshold", static_cast<double>(oo.box_threshold)},
               {"unclip_ratio", static_cast<double>(oo.unclip_ratio)},
               {"drop_score", static_cast<double>(oo.drop_score)}};
  }
  if (slot >= 0) im.free_slot(slot);
  im.release(need);
  {
    std::lock_guard<std::mutex> lk(im.mu);
    (run_status.ok() ? im.stats[m->id].executions : im.stats[m->id].failures)++;
  }
  if (!run_status.ok()) return run_status;
  if (key) {
    POWER_ASSIGN_OR_RETURN(std::string canon_out, receipt::canonical_json(out.result));
    json body;
    body["schema"] = std::string(receipt::kReceiptSchema);
    body["model"] = m->model_json;
    json config = {
        {"task", task_name(req.task)},    {"threads", im.opts.threads},
        {"max_batch", m->max_batch},      {"kernel_isa", std::string(cpu_isa_name(cpu_isa()))},
        {"power_version", POWER_VERSION}, {"options", options.is_null() ? json::object() : options},
        {"nondeterminism", json::array()}};
    body["config"] = std::move(config);
    body["device"] = receipt::device_json();
    input_info["sha256"] = sha256_hex(req.input);
    input_info["bytes"] = req.input.size();
    body["input"] = std::move(input_info);
    body["output"] = {{"kind", "json"}, {"sha256", sha256_hex(canon_out)}};
    body["timings"] = {
        {"decode_ms", std::chrono::duration<double, std::milli>(t_decoded - t0).count()},
        {"queue_ms", std::chrono::duration<double, std::milli>(t_admitted - t_decoded).count()},
        {"run_ms", ms_since(t_admitted)}};
    POWER_ASSIGN_OR_RETURN(out.receipt, receipt::sign_receipt(std::move(body), *key));
  }
  return out;
}

}  // namespace power::onnx
