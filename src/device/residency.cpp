#include "device/residency.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "base/env.h"
#include "base/log.h"
#include "base/sha256.h"
#include "device/weights_mirror.h"
#include "kernels/cpu/matmul_repack.h"

namespace power {
namespace {

constexpr uint64_t kAlign = 64;
constexpr uint64_t kDirectAlign = 4096;
constexpr int kMaxIoWorkers = 2;             // group loads in flight at once
constexpr uint64_t kReadChunk = 4ull << 20;  // bytes per pread (>= 1 MiB, see the header)

uint64_t round_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

std::shared_ptr<uint8_t> aligned_bytes(uint64_t n, uint64_t align) {
  void* p = nullptr;
  if (posix_memalign(&p, align, std::max<uint64_t>(round_up(n, align), align)) != 0) return nullptr;
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// "blk.<n>." -> n; -1 for tensors outside the blocks.
int64_t block_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t n = -1;
  const char* b = name.data() + 4;
  const char* e = name.data() + name.size();
  auto [p, ec] = std::from_chars(b, e, n);
  if (ec != std::errc() || p == b || p == e || *p != '.') return -1;
  return n;
}

std::string bytes_text(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return fmt::format("{} B", b);
}

}  // namespace

std::string_view weight_tier_name(WeightTier t) {
  switch (t) {
    case WeightTier::kPinned:
      return "pinned";
    case WeightTier::kRows:
      return "rows";
    case WeightTier::kStreamed:
      return "streamed";
  }
  return "?";
}

uint64_t WeightsBudget::resolve(uint64_t total) const {
  if (!set) return UINT64_MAX;
  if (percent) {
    const long double b = static_cast<long double>(total) * value / 100.0L;
    return b >= static_cast<long double>(UINT64_MAX) ? UINT64_MAX : static_cast<uint64_t>(b);
  }
  return value >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(value);
}

std::string WeightsBudget::to_string() const {
  if (!set) return "auto";
  if (percent) return fmt::format("{}%", value);
  return fmt::format("{}", static_cast<uint64_t>(value));
}

Result<WeightsBudget> parse_weights_budget(std::string_view text) {
  auto bad = [&](const char* why) {
    return Status(StatusCode::kInvalidArgument, "bad weights budget")
        .with("value", std::string(text))
        .with("reason", why)
        .with("expected", "bytes (e.g. 800000000, 800M, 1.5GiB) or a percentage (e.g. 50%)");
  };
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t lead = 0;
  while (lead < s.size() && std::isspace(static_cast<unsigned char>(s[lead]))) ++lead;
  s = s.substr(lead);
  if (s.empty()) return bad("empty");
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return bad("no number");
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + i, v);
  if (ec != std::errc() || p != s.data() + i || !std::isfinite(v) || v < 0) return bad("no number");
  size_t u = i;
  while (u < s.size() && std::isspace(static_cast<unsigned char>(s[u]))) ++u;
  std::string unit = s.substr(u);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  WeightsBudget b;
  b.set = true;
  if (unit == "%") {
    if (v > 100) return bad("a percentage above 100");
    b.percent = true;
    b.value = v;
    return b;
  }
  static const std::map<std::string, double> kUnits = {{"", 1},
                                                       {"b", 1},
                                                       {"k", 1e3},
                                                       {"kb", 1e3},
                                                       {"m", 1e6},
                                                       {"mb", 1e6},
                                                       {"g", 1e9},
                                                       {"gb", 1e9},
                                                       {"t", 1e12},
                                                       {"tb", 1e12},
                                                       {"kib", 1024.0},
                                                       {"mib", 1048576.0},
                                                       {"gib", 1073741824.0},
                                                       {"tib", 1099511627776.0}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) return bad("unknown unit");
  b.value = std::floor(v * it->second);
  return b;
}

ResidencyPlan plan_residency(std::vector<ResidencyTensor> tensors, uint64_t budget_bytes,
                             std::string artifact_sha256) {
  std::sort(tensors.begin(), tensors.end(), [](const ResidencyTensor& a, const ResidencyTensor& b) {
    return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.name < b.name;
  });
  ResidencyPlan plan;
  plan.artifact_sha256 = std::move(artifact_sha256);
  plan.budget_bytes = budget_bytes;
  plan.tensors = std::move(tensors);
  const size_t n = plan.tensors.size();
  plan.tier.assign(n, WeightTier::kPinned);
  plan.group_of.assign(n, -1);
  std::map<int64_t, std::vector<int>> blocks;
  std::vector<int> outside;
  for (size_t i = 0; i < n; ++i) {
    const ResidencyTensor& t = plan.tensors[i];
    plan.total_bytes += t.resident_bytes;
    if (t.small) {
      plan.small_bytes += t.resident_bytes;
      continue;
    }
    if (t.rows_only) {
      plan.tier[i] = WeightTier::kRows;
      continue;
    }
    const int64_t blk = block_of(t.name);
    if (blk >= 0) {
      blocks[blk].push_back(static_cast<int>(i));
    } else {
      outside.push_back(static_cast<int>(i));
    }
  }
  // Groups in pass order: the blocks, then the matrices outside them (the output layer) in file
  // order.
  auto add_group = [&](std::string name, std::vector<int> members) {
    ResidencyGroup g;
    g.name = std::move(name);
    g.file_begin = UINT64_MAX;
    for (int m : members) {
      const ResidencyTensor& t = plan.tensors[static_cast<size_t>(m)];
      g.resident_bytes += t.resident_bytes;
      g.file_begin = std::min(g.file_begin, t.file_offset);
      g.file_end = std::max(g.file_end, t.file_offset + t.file_bytes);
    }
    g.members = std::move(members);
    plan.groups.push_back(std::move(g));
  };
  for (auto& [blk, members] : blocks) add_group(fmt::format("blk.{}", blk), members);
  for (int m : outside) add_group(plan.tensors[static_cast<size_t>(m)].name, {m});

  // Whole groups from the front of the pass, then from its back, while they fit.
  std::vector<bool> pinned(plan.groups.size(), budget_bytes >= plan.total_bytes);
  if (budget_bytes < plan.total_bytes) {
    uint64_t left = budget_bytes > plan.small_bytes ? budget_bytes - plan.small_bytes : 0;
    size_t front = 0, back = plan.groups.size();
    while (front < back && plan.groups[front].resident_bytes <= left) {
      left -= plan.groups[front].resident_bytes;
      pinned[front++] = true;
    }
    while (back > front && plan.groups[back - 1].resident_bytes <= left) {
      left -= plan.groups[back - 1].resident_bytes;
      pinned[--back] = true;
    }
  }
  // A streamed matrix outside the blocks larger than the largest block is split into row
  // pieces (whole groups of 8 rows) of at most that size: staging is sized by a block.
  uint64_t cap = 0;
  for (size_t g = 0; g < blocks.size(); ++g) cap = std::max(cap, plan.groups[g].resident_bytes);
  std::vector<ResidencyGroup> groups;
  std::vector<bool> group_pinned;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    ResidencyGroup& grp = plan.groups[g];
    const ResidencyTensor& t0 = plan.tensors[static_cast<size_t>(grp.members.front())];
    const int64_t rows = t0.shape.size() == 2 ? t0.shape[1] : 0;
    if (pinned[g] || g < blocks.size() || cap == 0 || grp.resident_bytes <= cap || rows < 16) {
      groups.push_back(std::move(grp));
      group_pinned.push_back(pinned[g]);
      continue;
    }
    const uint64_t per_row =
        (grp.resident_bytes + static_cast<uint64_t>(rows) - 1) / static_cast<uint64_t>(rows);
    const int64_t piece_rows = std::max<int64_t>(8, static_cast<int64_t>(cap / per_row) / 8 * 8);
    const uint64_t row_bytes = t0.file_bytes / static_cast<uint64_t>(rows);
    uint64_t left_bytes = grp.resident_bytes;
    for (int64_t r0 = 0; r0 < rows; r0 += piece_rows) {
      // The last piece takes the rest, so that no piece is smaller than 8 rows.
      const int64_t r1 = rows - (r0 + piece_rows) < 8 ? rows : r0 + piece_rows;
      ResidencyGroup piece;
      piece.name = fmt::format("{}[{}:{}]", grp.name, r0, r1);
      piece.members = grp.members;
      piece.row_begin = r0;
      piece.row_end = r1;
      piece.file_begin = t0.file_offset + static_cast<uint64_t>(r0) * row_bytes;
      piece.file_end = t0.file_offset + static_cast<uint64_t>(r1) * row_bytes;
      piece.resident_bytes = r1 == rows ? left_bytes
                                        : grp.resident_bytes * static_cast<uint64_t>(r1 - r0) /
                                              static_cast<uint64_t>(rows);
      left_bytes -= piece.resident_bytes;
      groups.push_back(std::move(piece));
      group_pinned.push_back(false);
      if (r1 == rows) break;
    }
  }
  plan.groups = std::move(groups);
  plan.pieces.assign(n, 0);
  plan.pinned_bytes = plan.small_bytes;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const ResidencyGroup& grp = plan.groups[g];
    if (group_pinned[g]) {
      plan.pinned_bytes += grp.resident_bytes;
      continue;
    }
    plan.streamed.push_back(static_cast<int>(g));
    plan.streamed_bytes += grp.resident_bytes;
    for (int m : grp.members) {
      const auto mi = static_cast<size_t>(m);
      plan.tier[mi] = WeightTier::kStreamed;
      if (plan.pieces[mi]++ == 0) plan.group_of[mi] = static_cast<int>(g);
    }
    plan.streamed_file_bytes += grp.file_end - grp.file_begin;
  }
  nlohmann::json j = plan.to_json();
  j.erase("digest");
  plan.digest = sha256_hex(j.dump());
  return plan;
}

nlohmann::json ResidencyPlan::to_json() const {
  nlohmann::json j;
  j["schema"] = kSchema;
  j["artifact_sha256"] = artifact_sha256;
  j["budget_bytes"] =
      budget_bytes == UINT64_MAX ? nlohmann::json(nullptr) : nlohmann::json(budget_bytes);
  j["total_bytes"] = total_bytes;
  j["small_bytes"] = small_bytes;
  j["pinned_bytes"] = pinned_bytes;
  j["streamed_bytes"] = streamed_bytes;
  j["streamed_file_bytes_per_pass"] = streamed_file_bytes;
  nlohmann::json ts = nlohmann::json::array();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ResidencyTensor& t = tensors[i];
    ts.push_back({{"name", t.name},
                  {"type", ggml_type_name(t.type)},
                  {"shape", t.shape},
                  {"offset", t.file_offset},
                  {"length", t.file_bytes},
                  {"resident_bytes", t.resident_bytes},
                  {"tier", weight_tier_name(tier[i])}});
  }
  j["tensors"] = std::move(ts);
  nlohmann::json gs = nlohmann::json::array();
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool s =
        std::find(streamed.begin(), streamed.end(), static_cast<int>(g)) != streamed.end();
    gs.push_back({{"name", groups[g].name},
                  {"tensors", groups[g].members.size()},
                  {"resident_bytes", groups[g].resident_bytes},
                  {"tier", s ? "streamed" : "pinned"}});
  }
  j["groups"] = std::move(gs);
  j["digest"] = digest;
  return j;
}

std::string ResidencyPlan::to_text() const {
  std::string out;
  out +=
      fmt::format("artifact  sha256:{}\n", artifact_sha256.empty() ? "(unknown)" : artifact_sha256);
  out += fmt::format("budget    {}\n",
                     budget_bytes == UINT64_MAX
                         ? std::string("none")
                         : fmt::format("{} ({} bytes)", bytes_text(budget_bytes), budget_bytes));
  out += fmt::format("resident  {} of {} ({} always pinned: vectors)\n", bytes_text(pinned_bytes),
                     bytes_text(total_bytes), bytes_text(small_bytes));
  out += fmt::format("streamed  {} in {} groups; {} read from the artifact per pass\n",
                     bytes_text(streamed_bytes), streamed.size(), bytes_text(streamed_file_bytes));
  out += fmt::format("digest    {}\n", digest);
  out += "groups:\n";
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool s =
        std::find(streamed.begin(), streamed.end(), static_cast<int>(g)) != streamed.end();
    out += fmt::format("  {:<24} {:<9} {:>3} tensors  {:>11}\n", groups[g].name,
                       s ? "streamed" : "pinned", groups[g].members.size(),
                       bytes_text(groups[g].resident_bytes));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tier[i] == WeightTier::kRows) {
      out += fmt::format("  {:<24} rows      (row lookups from the mapping, {})\n", tensors[i].name,
                         bytes_text(tensors[i].file_bytes));
    }
  }
  return out;
}

// ---- WeightStreamer -------------------------------------------------------------------------

Result<std::unique_ptr<WeightStreamer>> WeightStreamer::create(const std::string& path,
                                                               const ResidencyPlan& plan,
                                                               const std::vector<TensorView>& views,
                                                               int lookahead, int slots,
                                                               const WeightsMirror* mirror) {
  if (lookahead < 0 || lookahead > 4) {
    return Status(StatusCode::kInvalidArgument, "prefetch lookahead must be 0 to 4 groups")
        .with("lookahead", lookahead);
  }
  if (views.size() != plan.tensors.size()) {
    return Status(StatusCode::kInternal, "views do not match the plan");
  }
  std::unique_ptr<WeightStreamer> s(new WeightStreamer());
  s->plan_ = &plan;
  s->mirror_ = mirror;
  s->views_ = views;
  s->lookahead_ = lookahead;
  s->order_.assign(plan.groups.size(), -1);
  for (size_t i = 0; i < plan.streamed.size(); ++i)
    s->order_[plan.streamed[i]] = static_cast<int>(i);
  uint64_t span = 0;
  for (int g : plan.streamed) {
    const ResidencyGroup& grp = plan.groups[static_cast<size_t>(g)];
    uint64_t bytes = 0;
    for (int m : grp.members) {
      uint64_t offset = 0;
      const TensorView v = s->member_view(grp, m, &offset);
      const uint64_t file_bytes = v.row_bytes() * static_cast<uint64_t>(v.n_rows());
      const uint64_t pb = packed_bytes(v);
      bytes += pb > 0 ? round_up(pb, kAlign) + (v.ne[1] % 8 != 0 ? round_up(file_bytes, kAlign) : 0)
                      : round_up(file_bytes, kAlign);
    }
    s->slot_bytes_ = std::max(s->slot_bytes_, bytes);
    span = std::max(span, grp.file_end - grp.file_begin);
  }
  if (path.empty()) {
    return Status(StatusCode::kUnsupported,
                  "these weights have no file to stream from (decrypted in memory): give a "
                  "weights budget of at least the model's size");
  }
  s->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (s->fd_ < 0) {
    return Status(StatusCode::kNotFound, "cannot open the weights to stream them")
        .with("path", path)
        .with("error", std::strerror(errno));
  }
#ifdef O_DIRECT
  // Buffered reads (then dropped from the page cache) by default: on the VM this was measured
  // on, the kernel's read-ahead gave 3.2 tok/s at 0 % where O_DIRECT gave 1.9 (docs/RESIDENCY.md).
  // POWER_DIRECT_IO=1 reads around the page cache where the filesystem allows it.
  if (env_switch_set_on("POWER_DIRECT_IO")) {
    s->direct_fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  }
#endif
  s->direct_ok_ = s->direct_fd_ >= 0;
  // Reads of different groups in flight at once: with read-ahead, the groups ahead load on
  // their own workers (more requests in flight, packing in parallel), each with its own read
  // buffer.
  const int workers = std::clamp(lookahead, 1, kMaxIoWorkers);
  s->io_buf_bytes_ = round_up(span, kDirectAlign) +
                     (mirror != nullptr ? WeightsMirror::kReadSlack : 2 * kDirectAlign);
  for (int w = 0; w < workers; ++w) {
    s->io_bufs_.push_back(aligned_bytes(s->io_buf_bytes_, kDirectAlign));
    if (s->io_bufs_.back() == nullptr) {
      return Status(StatusCode::kResourceExhausted, "cannot allocate the weights read buffer")
          .with("bytes", s->io_buf_bytes_);
    }
  }
  const int n_slots = slots > 0 ? slots : lookahead + 2;
  s->slots_.resize(static_cast<size_t>(std::max(2, n_slots)));
  for (Slot& slot : s->slots_) {
    slot.mem = aligned_bytes(s->slot_bytes_, kDirectAlign);
    if (slot.mem == nullptr) {
      return Status(StatusCode::kResourceExhausted, "cannot allocate a weights staging slot")
          .with("bytes", s->slot_bytes_);
    }
  }
  s->staging_bytes_ = s->slots_.size() * s->slot_bytes_ + s->io_bufs_.size() * s->io_buf_bytes_;
  s->stats_.direct_io = s->direct_ok_;
  for (int w = 0; w < workers; ++w) s->io_.emplace_back([p = s.get(), w] { p->io_loop(w); });
  return s;
}

WeightStreamer::~WeightStreamer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    POWER_LOG_INFO(
        "weights streamer: {} group reads, {} bytes from the artifact, {} from the mirror "
        "({} mirror reads failed), {} read errors",
        stats_.loads, stats_.bytes_read, stats_.mirror_bytes_read, stats_.mirror_fallbacks,
        stats_.read_errors);
  }
  io_cv_.notify_all();
  for (std::thread& t : io_) t.join();
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

int WeightStreamer::slot_of(int group) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.group == group && (s.state == Slot::kLoading || s.state == Slot::kReady)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool WeightStreamer::wanted(int group) const {
  const int n = static_cast<int>(plan_->streamed.size());
  const int pos = order_[static_cast<size_t>(group)];
  for (int h : heads_) {
    if (h < 0 || pos < 0) continue;
    const int d = ((pos - h) % n + n) % n;
    if (d <= lookahead_) return true;
  }
  return false;
}

int WeightStreamer::pick_victim(int need_group) {
  const bool urgent = need_group >= 0;
  int best = -1, best_rank = -1;
  const int n = static_cast<int>(plan_->streamed.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.refs > 0 || s.state == Slot::kLoading) continue;
    int rank;
    if (s.state == Slot::kEmpty || s.state == Slot::kFailed) {
      rank = 3 * n + 2;
    } else if (!wanted(s.group)) {
      rank = 2 * n + 1;
    } else if (urgent) {
      // Wanted soon by some pass: the one needed latest goes first.
      int d = 0;
      const int pos = order_[static_cast<size_t>(s.group)];
      for (int h : heads_) {
        if (h >= 0) d = std::max(d, ((pos - h) % n + n) % n);
      }
      rank = d;
    } else {
      continue;
    }
    if (rank > best_rank) {
      best_rank = rank;
      best = static_cast<int>(i);
    }
  }
  if (best >= 0 && slots_[static_cast<size_t>(best)].prefetched) {
    ++stats_.prefetch_unused;
    slots_[static_cast<size_t>(best)].prefetched = false;
  }
  return best;
}

TensorView WeightStreamer::member_view(const ResidencyGroup& g, int m,
                                       uint64_t* file_offset) const {
  TensorView v = views_[static_cast<size_t>(m)];
  *file_offset = plan_->tensors[static_cast<size_t>(m)].file_offset;
  if (g.row_end > 0) {
    const uint64_t skip = static_cast<uint64_t>(g.row_begin) * v.nb[1];
    v.data = static_cast<const uint8_t*>(v.data) + skip;
    v.ne[1] = g.row_end - g.row_begin;
    v.nb[2] = v.nb[1] * static_cast<uint64_t>(v.ne[1]);
    v.nb[3] = v.nb[2] * static_cast<uint64_t>(v.ne[2]);
    *file_offset += skip;
  }
  return v;
}

Result<WeightStreamer::Lease> WeightStreamer::acquire(Cursor& c, int group, int tensor) {
  auto lease_of = [&](int slot) -> Result<Lease> {
    for (const Member& m : slots_[static_cast<size_t>(slot)].members) {
      if (m.tensor == tensor) {
        return Lease{&m.view, m.packed != nullptr ? &m.packed : nullptr, m.row_begin};
      }
    }
    return Status(StatusCode::kInternal, "tensor not in its streamed group")
        .with("group", group)
        .with("tensor", tensor);
  };
  if (c.slot >= 0 && c.group == group) return lease_of(c.slot);
  release(c);
  if (group < 0 || static_cast<size_t>(group) >= order_.size() ||
      order_[static_cast<size_t>(group)] < 0) {
    return Status(StatusCode::kInternal, "not a streamed group").with("group", group);
  }
  std::unique_lock<std::mutex> lk(mu_);
  ++stats_.acquires;
  const int pos = order_[static_cast<size_t>(group)];
  heads_.push_back(pos);
  int s = slot_of(group);
  while (s < 0) {
    s = pick_victim(group);
    if (s >= 0) {
      Slot& v = slots_[static_cast<size_t>(s)];
      v.group = group;
      v.state = Slot::kLoading;
      v.prefetched = false;
      queue_.push_front(s);
      io_cv_.notify_one();
      break;
    }
    cv_.wait(lk);
    s = slot_of(group);
  }
  Slot& slot = slots_[static_cast<size_t>(s)];
  ++slot.refs;
  if (slot.prefetched) {
    ++stats_.prefetch_useful;
    slot.prefetched = false;
  }
  // Read ahead: the next `lookahead` streamed groups in pass order (the next pass starts over).
  const int n = static_cast<int>(plan_->streamed.size());
  for (int d = 1; d <= lookahead_ && d < n; ++d) {
    const int g = plan_->streamed[static_cast<size_t>((pos + d) % n)];
    if (slot_of(g) >= 0) continue;
    const int v = pick_victim(-1);
    if (v < 0) break;
    Slot& p = slots_[static_cast<size_t>(v)];
    p.group = g;
    p.state = Slot::kLoading;
    p.prefetched = true;
    queue_.push_back(v);
    ++stats_.prefetch_loads;
    io_cv_.notify_one();
  }
  if (slot.state == Slot::kReady) {
    ++stats_.ready_hits;
  } else {
    ++stats_.waits;
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(lk, [&] { return slot.state == Slot::kReady || slot.state == Slot::kFailed; });
    stats_.wait_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  if (slot.state == Slot::kFailed) {
    heads_.erase(std::find(heads_.begin(), heads_.end(), pos));
    Status err = slot.error;
    if (--slot.refs == 0) {
      slot.state = Slot::kEmpty;
      slot.group = -1;
    }
    cv_.notify_all();
    return err.with("group", plan_->groups[static_cast<size_t>(group)].name);
  }
  c.slot = s;
  c.group = group;
  return lease_of(s);
}

std::vector<std::span<const uint8_t>> WeightStreamer::staging_regions() const {
  std::vector<std::span<const uint8_t>> out;
  for (const Slot& s : slots_) out.emplace_back(s.mem.get(), static_cast<size_t>(slot_bytes_));
  for (const auto& b : io_bufs_) out.emplace_back(b.get(), static_cast<size_t>(io_buf_bytes_));
  return out;
}

void WeightStreamer::release(Cursor& c) {
  if (c.slot < 0) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Slot& s = slots_[static_cast<size_t>(c.slot)];
    --s.refs;
    auto it = std::find(heads_.begin(), heads_.end(), order_[static_cast<size_t>(c.group)]);
    if (it != heads_.end()) heads_.erase(it);
  }
  cv_.notify_all();
  c = Cursor{};
}

StreamStats WeightStreamer::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void WeightStreamer::io_loop(int worker) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    io_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const int s = queue_.front();
    queue_.pop_front();
    Slot& slot = slots_[static_cast<size_t>(s)];
    const int group = slot.group;
    lk.unlock();
    bool from_mirror = false;
    Status mirror_error;
    Status st = load(slot, group, worker, &from_mirror, &mirror_error);
    lk.lock();
    if (!mirror_error.ok()) {
      // Warned the 1st, 2nd, 4th, 8th ... time: a damaged mirror fails every pass.
      const uint64_t n = ++stats_.mirror_fallbacks;
      if ((n & (n - 1)) == 0) {
        POWER_LOG_WARN("weights mirror read failed ({} so far), read the artifact instead: {}", n,
                       mirror_error.to_string());
      }
    }
    if (st.ok()) {
      slot.state = Slot::kReady;
      slot.error = Status();
      ++stats_.loads;
      const ResidencyGroup& g = plan_->groups[static_cast<size_t>(group)];
      if (from_mirror) {
        ++stats_.mirror_loads;
        stats_.mirror_bytes_read += g.file_end - g.file_begin;
      } else {
        stats_.bytes_read += g.file_end - g.file_begin;
      }
    } else {
      slot.state = Slot::kFailed;
      slot.error = std::move(st);
      slot.prefetched = false;
      ++stats_.read_errors;
      POWER_LOG_WARN("weights read failed: {}", slot.error.to_string());
    }
    stats_.direct_io = direct_ok_;
    cv_.notify_all();
  }
}

Status WeightStreamer::load(Slot& s, int group, int worker, bool* from_mirror,
                            Status* mirror_error) {
  const ResidencyGroup& g = plan_->groups[static_cast<size_t>(group)];
  const uint64_t begin = g.file_begin, end = g.file_end;
  uint8_t* buf = io_bufs_[static_cast<size_t>(worker)].get();
  uint64_t a0 = begin;  // file offset of buf[0]
  bool done = false;
  if (mirror_ != nullptr && mirror_->covers(begin, end)) {
    Status ms = mirror_->read(begin, end, buf, io_buf_bytes_, &a0);
    if (ms.ok()) {
      done = true;
      *from_mirror = true;
    } else {
      *mirror_error = std::move(ms);
      a0 = begin;
    }
  }
  if (!done && direct_ok_) {
    a0 = begin / kDirectAlign * kDirectAlign;
    const uint64_t a1 = round_up(end, kDirectAlign);
    uint64_t off = a0;
    bool fallback = false;
    while (off < end) {
      const uint64_t want = std::min(kReadChunk, a1 - off);
      const ssize_t r = ::pread(direct_fd_, buf + (off - a0), want, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EINVAL) {  // the filesystem refuses direct reads after all
        fallback = true;
        break;
      }
      if (r < 0) {
        return Status(StatusCode::kIo, "reading the weights failed")
            .with("offset", off)
            .with("error", std::strerror(errno));
      }
      if (r == 0) break;
      off += static_cast<uint64_t>(r);
    }
    if (fallback) {
      if (direct_ok_.exchange(false)) {
        POWER_LOG_INFO("direct reads refused by the filesystem; reading through the page cache");
      }
    } else if (off < end) {
      return Status(StatusCode::kCorrupt, "short read of the weights (file truncated?)")
          .with("offset", off)
          .with("expected_end", end);
    } else {
      done = true;
    }
  }
  if (!done) {
    a0 = begin;
    uint64_t off = begin;
    while (off < end) {
      const uint64_t want = std::min(kReadChunk, end - off);
      const ssize_t r = ::pread(fd_, buf + (off - a0), want, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        return Status(StatusCode::kIo, "reading the weights failed")
            .with("offset", off)
            .with("error", std::strerror(errno));
      }
      if (r == 0) {
        return Status(StatusCode::kCorrupt, "short read of the weights (file truncated?)")
            .with("offset", off)
            .with("expected_end", end);
      }
      off += static_cast<uint64_t>(r);
    }
    // Read once per pass: keep them out of the page cache.
    ::posix_fadvise(fd_, static_cast<off_t>(begin), static_cast<off_t>(end - begin),
                    POSIX_FADV_DONTNEED);
  }
  // Into the slot: packed copies made by the resident path's code, other tensors as read.
  s.members.clear();
  uint64_t off = 0;
  for (int m : g.members) {
    uint64_t file_offset = 0;
    TensorView src = member_view(g, m, &file_offset);
    const uint64_t file_bytes = src.row_bytes() * static_cast<uint64_t>(src.n_rows());
    src.data = buf + (file_offset - a0);
    Member mem;
    mem.tensor = m;
    mem.view = src;
    mem.row_begin = g.row_begin;
    const uint64_t pb = packed_bytes(src);
    if (pb > 0) {
      mem.packed = make_packed(src, std::shared_ptr<uint8_t>(s.mem, s.mem.get() + off));
      mem.view.data = s.mem.get() + off;  // only the packed kernels read it
      off += round_up(pb, kAlign);
      if (src.ne[1] % 8 != 0) {  // rows past the last group of 8 come from the original layout
        std::memcpy(s.mem.get() + off, src.data, file_bytes);
        mem.view.data = s.mem.get() + off;
        off += round_up(file_bytes, kAlign);
      }
    } else {
      std::memcpy(s.mem.get() + off, src.data, file_bytes);
      mem.view.data = s.mem.get() + off;
      off += round_up(file_bytes, kAlign);
    }
    if (off > slot_bytes_) return Status(StatusCode::kInternal, "staging slot overflow");
    s.members.push_back(std::move(mem));
  }
  return Status();
}

}  // namespace power
