#include "device/weights_mirror.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "base/crc32c.h"
#include "base/file.h"
#include "base/log.h"
#include "base/sha256.h"

namespace power {
namespace {

constexpr uint64_t kCopyChunk = 4ull << 20;  // bytes per pread/write while building
constexpr uint64_t kDataAlign = 4096;        // each range starts on a page of `data`

Status io_error(const char* what, const std::string& path, int err) {
  return Status(StatusCode::kIo, what).with("path", path).with("error", std::strerror(err));
}

nlohmann::json range_json(const WeightsMirror::Range& r) {
  nlohmann::json crcs = nlohmann::json::array();
  for (uint32_t c : r.crc32c) crcs.push_back(fmt::format("{:08x}", c));
  return {{"offset", r.begin},
          {"length", r.end - r.begin},
          {"data_offset", r.data_offset},
          {"sha256", r.sha256},
          {"crc32c", std::move(crcs)}};
}

uint64_t chunks_of(uint64_t bytes) {
  return (bytes + WeightsMirror::kChunk - 1) / WeightsMirror::kChunk;
}

// Byte spans as sorted ranges, merged where they touch or overlap (no data yet).
std::vector<WeightsMirror::Range> merge_spans(std::vector<std::pair<uint64_t, uint64_t>> spans) {
  std::sort(spans.begin(), spans.end());
  std::vector<WeightsMirror::Range> out;
  for (const auto& [b, e] : spans) {
    if (!out.empty() && b <= out.back().end) {
      out.back().end = std::max(out.back().end, e);
    } else {
      WeightsMirror::Range r;
      r.begin = b;
      r.end = e;
      out.push_back(r);
    }
  }
  return out;
}

// The ranges a mirror of `plan` holds under `cap` bytes: whole groups, the streamed ones in
// pass order first (read every pass), then the pinned ones (read at load), each while it fits;
// then sorted by offset and merged where they touch (so the cap counts only group bytes).
std::vector<WeightsMirror::Range> choose_ranges(const ResidencyPlan& plan, uint64_t cap) {
  std::vector<int> order(plan.streamed.begin(), plan.streamed.end());
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    if (std::find(plan.streamed.begin(), plan.streamed.end(), static_cast<int>(g)) ==
        plan.streamed.end()) {
      order.push_back(static_cast<int>(g));
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  uint64_t used = 0;
  for (int g : order) {
    const ResidencyGroup& grp = plan.groups[static_cast<size_t>(g)];
    const uint64_t n = grp.file_end - grp.file_begin;
    if (n == 0 || n > cap - used) continue;
    used += n;
    spans.emplace_back(grp.file_begin, grp.file_end);
  }
  return merge_spans(std::move(spans));
}

// Generation 1 is `index.json` + `data` (what every mirror before generations held); a mirror
// grown later is `index.<g>.json` + `data.<g>`.
std::string index_name(int g) {
  return g == 1 ? "index.json" : fmt::format("index.{}.json", g);
}
std::string data_name(int g) {
  return g == 1 ? "data" : fmt::format("data.{}", g);
}

// The highest generation with an index in `dir`; 0 when there is none.
int newest_generation(const std::string& dir) {
  int newest = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int g = 0;
    if (name == "index.json") {
      g = 1;
    } else if (name.starts_with("index.") && name.ends_with(".json")) {
      const std::string digits = name.substr(6, name.size() - 11);
      if (!digits.empty() && digits.size() < 9 &&
          std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        g = std::stoi(digits);
      }
    }
    newest = std::max(newest, g);
  }
  return newest;
}

// Removes from `dir` every file named data* or index* that is not generation `keep`'s (older
// generations, builds that did not finish). The caller holds the directory's lock.
void remove_all_but(const std::string& dir, int keep) {
  std::error_code ec;
  std::vector<std::string> doomed;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("data") && !name.starts_with("index")) continue;
    if (keep > 0 && (name == index_name(keep) || name == data_name(keep))) continue;
    doomed.push_back(e.path().string());
  }
  for (const std::string& p : doomed) ::unlink(p.c_str());
}

uint64_t range_bytes(const std::vector<WeightsMirror::Range>& ranges) {
  uint64_t n = 0;
  for (const auto& r : ranges) n += r.end - r.begin;
  return n;
}

// The bytes of [begin, end) that `ranges` (sorted, disjoint) hold.
uint64_t bytes_covered(const std::vector<WeightsMirror::Range>& ranges, uint64_t begin,
                       uint64_t end) {
  uint64_t n = 0;
  for (const auto& r : ranges) {
    const uint64_t b = std::max(begin, r.begin), e = std::min(end, r.end);
    if (b < e) n += e - b;
  }
  return n;
}

// The bytes of `plan`'s streamed groups (read every pass) that `ranges` hold.
uint64_t streamed_bytes_covered(const ResidencyPlan& plan,
                                const std::vector<WeightsMirror::Range>& ranges) {
  uint64_t n = 0;
  for (int g : plan.streamed) {
    const ResidencyGroup& grp = plan.groups[static_cast<size_t>(g)];
    n += bytes_covered(ranges, grp.file_begin, grp.file_end);
  }
  return n;
}

// The union of two sorted, disjoint range lists (no data yet).
std::vector<WeightsMirror::Range> merge_ranges(const std::vector<WeightsMirror::Range>& a,
                                               const std::vector<WeightsMirror::Range>& b) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& r : a) spans.emplace_back(r.begin, r.end);
  for (const auto& r : b) spans.emplace_back(r.begin, r.end);
  return merge_spans(std::move(spans));
}

}  // namespace

Result<uint64_t> parse_mirror_bytes(std::string_view text) {
  if (text.empty()) return UINT64_MAX;
  POWER_ASSIGN_OR_RETURN(WeightsBudget cap, parse_weights_budget(text));
  if (cap.percent) {
    return Status(StatusCode::kInvalidArgument, "a mirror's byte cap takes bytes, not a percentage")
        .with("value", std::string(text));
  }
  return cap.resolve(0);
}

WeightsMirror::~WeightsMirror() {
  if (fd_ >= 0) ::close(fd_);
}

Status WeightsMirror::load_index(int generation, uint64_t artifact_bytes) {
  const std::string index_path = dir_ + "/" + index_name(generation);
  auto bad = [&](const char* why) {
    return Status(StatusCode::kCorrupt, "the weights mirror's index is not usable")
        .with("path", index_path)
        .with("reason", why)
        .with("fix", "remove the directory; the next load rebuilds it");
  };
  POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(index_path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not JSON");
  try {
    if (j.at("schema").get<std::string>() != kSchema) return bad("unknown schema");
    if (j.at("artifact_sha256").get<std::string>() != artifact_sha256_) {
      return bad("made for another artifact");
    }
    if (j.at("artifact_bytes").get<uint64_t>() != artifact_bytes) return bad("artifact size");
    if (j.value("generation", 1) != generation) return bad("generation differs from its name");
    for (const auto& jr : j.at("ranges")) {
      Range r;
      r.begin = jr.at("offset").get<uint64_t>();
      r.end = r.begin + jr.at("length").get<uint64_t>();
      r.data_offset = jr.at("data_offset").get<uint64_t>();
      r.sha256 = jr.at("sha256").get<std::string>();
      for (const auto& c : jr.at("crc32c")) {
        r.crc32c.push_back(static_cast<uint32_t>(std::stoul(c.get<std::string>(), nullptr, 16)));
      }
      if (r.end < r.begin || r.end > artifact_bytes ||
          r.crc32c.size() != chunks_of(r.end - r.begin) ||
          (!ranges_.empty() && r.begin < ranges_.back().end)) {
        return bad("a range is malformed");
      }
      data_bytes_ += r.end - r.begin;
      ranges_.push_back(std::move(r));
    }
    for (const auto& jt : j.at("tensors")) {
      auto t = tensor_digest_from_json(jt);
      if (!t.ok()) return bad("a tensor digest is malformed");
      tensors_.push_back(std::move(*t));
    }
  } catch (const std::exception&) {
    return bad("missing or mistyped fields");
  }
  generation_ = generation;
  data_path_ = dir_ + "/" + data_name(generation);
  fd_ = ::open(data_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return io_error("cannot open the weights mirror's data", data_path_, errno);
  return Status();
}

Status WeightsMirror::build(int generation, const std::string& artifact_path,
                            uint64_t artifact_bytes) {
  data_path_ = dir_ + "/" + data_name(generation);
  generation_ = generation;
  UniqueFd in(::open(artifact_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) return io_error("cannot open the artifact", artifact_path, errno);
  std::vector<uint8_t> buf(kCopyChunk);
  // The ranges into a temporary file, hashed on the way.
  const std::string tmp = fmt::format("{}/data.tmp-{}", dir_, ::getpid());
  UniqueFd out(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!out.valid()) return io_error("cannot create the weights mirror", tmp, errno);
  auto fail = [&](Status st) {
    ::unlink(tmp.c_str());
    return st;
  };
  uint64_t at = 0;
  data_bytes_ = 0;
  static const uint8_t kZeros[kDataAlign] = {};
  for (Range& r : ranges_) {
    const uint64_t pad = (kDataAlign - at % kDataAlign) % kDataAlign;
    if (Status st = write_all(out.get(), kZeros, pad, tmp); !st.ok()) return fail(st);
    at += pad;
    r.data_offset = at;
    r.crc32c.clear();
    Sha256 h;
    uint32_t crc = 0;
    uint64_t in_chunk = 0;
    for (uint64_t off = r.begin; off < r.end;) {
      const uint64_t n = std::min(kCopyChunk, r.end - off);
      if (Status st = pread_all(in.get(), buf.data(), n, off, artifact_path); !st.ok()) {
        return fail(st);
      }
      h.update(buf.data(), n);
      for (uint64_t p = 0; p < n;) {
        const uint64_t k = std::min(kChunk - in_chunk, n - p);
        crc = crc32c(buf.data() + p, k, crc);
        in_chunk += k;
        p += k;
        if (in_chunk == kChunk) {
          r.crc32c.push_back(crc);
          crc = 0;
          in_chunk = 0;
        }
      }
      if (Status st = write_all(out.get(), buf.data(), n, tmp); !st.ok()) return fail(st);
      ::posix_fadvise(in.get(), static_cast<off_t>(off), static_cast<off_t>(n),
                      POSIX_FADV_DONTNEED);
      off += n;
    }
    if (in_chunk > 0) r.crc32c.push_back(crc);
    r.sha256 = to_hex(h.finish());
    at += r.end - r.begin;
    data_bytes_ += r.end - r.begin;
  }
  if (::fchmod(out.get(), 0444) != 0 || ::fsync(out.get()) != 0) {
    return fail(io_error("fsync failed", tmp, errno));
  }
  // Read back what the disk holds (the cached pages dropped first) and re-hash it.
  ::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
  for (const Range& r : ranges_) {
    Sha256 h;
    for (uint64_t off = 0; off < r.end - r.begin; off += kCopyChunk) {
      const uint64_t n = std::min(kCopyChunk, r.end - r.begin - off);
      if (Status st = pread_all(out.get(), buf.data(), n, r.data_offset + off, tmp); !st.ok()) {
        return fail(st);
      }
      h.update(buf.data(), n);
    }
    if (to_hex(h.finish()) != r.sha256) {
      return fail(Status(StatusCode::kCorrupt,
                         "the weights mirror read back differs from the "
                         "artifact (disk or memory error?)")
                      .with("path", tmp)
                      .with("offset", r.begin));
    }
  }
  ::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
  out.reset();
  if (Status st = link_durable(tmp, data_path_); !st.ok()) return fail(st);

  nlohmann::json j;
  j["schema"] = kSchema;
  j["generation"] = generation;
  j["artifact_sha256"] = artifact_sha256_;
  j["artifact_bytes"] = artifact_bytes;
  j["chunk_bytes"] = kChunk;
  j["data_bytes"] = data_bytes_;
  nlohmann::json rs = nlohmann::json::array();
  for (const Range& r : ranges_) rs.push_back(range_json(r));
  j["ranges"] = std::move(rs);
  j["tensors"] = tensor_digests_json(tensors_);
  const std::string index_text = j.dump(1);
  if (Status st = write_file_exclusive(  // published last: the commit point
          dir_ + "/" + index_name(generation),
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(index_text.data()),
                                   index_text.size()),
          0444);
      !st.ok()) {
    ::unlink(data_path_.c_str());
    return st;
  }
  fd_ = ::open(data_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return io_error("cannot open the weights mirror's data", data_path_, errno);
  built_now_ = true;
  return Status();
}

Result<std::unique_ptr<WeightsMirror>> WeightsMirror::open_or_build(const MirrorOptions& o,
                                                                    const GgufFile& file,
                                                                    const ResidencyPlan& plan) {
  const std::string& artifact_path = file.path();
  if (plan.artifact_sha256.size() != 64) {
    return Status(StatusCode::kInvalidArgument, "a weights mirror needs the artifact's SHA-256");
  }
  const std::string dir = o.dir + "/sha256-" + plan.artifact_sha256;
  auto fresh = [&] {
    std::unique_ptr<WeightsMirror> m(new WeightsMirror());
    m->artifact_sha256_ = plan.artifact_sha256;
    m->dir_ = dir;
    return m;
  };
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Status(StatusCode::kIo, "cannot create the weights mirror directory")
        .with("path", dir)
        .with("error", ec.message());
  }
  struct stat ast {};
  if (::stat(artifact_path.c_str(), &ast) != 0) {
    return io_error("cannot stat the artifact", artifact_path, errno);
  }
  const auto artifact_bytes = static_cast<uint64_t>(ast.st_size);
  POWER_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(dir + "/.lock"));
  // Under the lock: the newest generation's index and data are the mirror; anything else named
  // data* or index* is an older generation or a build that did not finish.
  const int newest = newest_generation(dir);
  remove_all_but(dir, newest);
  uint64_t cap = o.max_bytes;
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) == 0) {
    const uint64_t avail = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    cap = std::min(cap, avail > o.reserve_bytes ? avail - o.reserve_bytes : 0);
  }
  std::vector<Range> wanted = choose_ranges(plan, cap);

  std::unique_ptr<WeightsMirror> held;
  if (newest > 0) {
    held = fresh();
    POWER_RETURN_IF_ERROR(held->load_index(newest, artifact_bytes));
    // Grown only when this plan's streamed groups would get more bytes from a new generation
    // (so two budgets that each fill the cap do not rebuild in turn).
    const uint64_t have = streamed_bytes_covered(plan, held->ranges_);
    if (streamed_bytes_covered(plan, wanted) <= have) return held;
    std::vector<Range> both = merge_ranges(held->ranges_, wanted);
    if (range_bytes(both) <= cap) wanted = std::move(both);
  }
  std::unique_ptr<WeightsMirror> m = fresh();
  m->ranges_ = std::move(wanted);
  if (held != nullptr) {
    m->tensors_ = held->tensors_;  // checked when that generation was built
  } else {
    // The per-tensor hash manifest of the whole artifact (cached beside the store).
    POWER_ASSIGN_OR_RETURN(
        TensorManifest manifest,
        load_or_hash_tensors(file, artifact_path, plan.artifact_sha256, o.tensor_manifest_dir));
    m->tensors_ = std::move(manifest.tensors);
  }
  if (Status st = m->build(newest + 1, artifact_path, artifact_bytes); !st.ok()) {
    if (held == nullptr) return st;
    POWER_LOG_WARN("weights mirror {} not grown, generation {} serves: {}", dir, newest,
                   st.to_string());
    return held;
  }
  if (held != nullptr) {
    // Processes reading the older generation keep their open descriptor.
    ::unlink((dir + "/" + index_name(newest)).c_str());
    ::unlink((dir + "/" + data_name(newest)).c_str());
  }
  POWER_LOG_INFO("weights mirror {}: generation {}, {} bytes in {} ranges{}", dir, m->generation_,
                 m->data_bytes_, m->ranges_.size(),
                 held != nullptr ? fmt::format(" (grown from {} bytes)", held->data_bytes_)
                                 : fmt::format(", {} tensors hashed", m->tensors_.size()));
  return m;
}

bool WeightsMirror::covers(uint64_t begin, uint64_t end) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                             [](uint64_t v, const Range& r) { return v < r.begin; });
  if (it == ranges_.begin()) return false;
  --it;
  return begin >= it->begin && end <= it->end;
}

Status WeightsMirror::read(uint64_t begin, uint64_t end, uint8_t* buf, uint64_t buf_bytes,
                           uint64_t* buf_offset) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                             [](uint64_t v, const Range& r) { return v < r.begin; });
  if (it == ranges_.begin() || end > std::prev(it)->end) {
    return Status(StatusCode::kNotFound, "the weights mirror does not hold these bytes");
  }
  const Range& r = *std::prev(it);
  const uint64_t k0 = (begin - r.begin) / kChunk;
  const uint64_t k1 = chunks_of(end - r.begin);
  const uint64_t a0 = r.begin + k0 * kChunk;
  const uint64_t a1 = std::min(r.begin + k1 * kChunk, r.end);
  if (a1 - a0 > buf_bytes) return Status(StatusCode::kInternal, "mirror read buffer too small");
  const uint64_t data_at = r.data_offset + (a0 - r.begin);
  const std::string& path = data_path_;
  POWER_RETURN_IF_ERROR(pread_all(fd_, buf, a1 - a0, data_at, path));
  ::posix_fadvise(fd_, static_cast<off_t>(data_at), static_cast<off_t>(a1 - a0),
                  POSIX_FADV_DONTNEED);
  auto mismatch = [&](uint64_t k) {
    const uint64_t c0 = r.begin + k * kChunk;
    return Status(StatusCode::kCorrupt, "weights mirror checksum mismatch")
        .with("path", path)
        .with("artifact_offset", c0)
        .with("chunk_bytes", std::min(c0 + kChunk, r.end) - c0);
  };
  // Whole chunks three at a time (three independent CRC chains), the rest one by one.
  uint64_t k = k0;
  for (; k + 3 <= k1 && r.begin + (k + 3) * kChunk <= r.end; k += 3) {
    const uint8_t* blocks[3];
    for (int i = 0; i < 3; ++i) blocks[i] = buf + (r.begin + (k + i) * kChunk - a0);
    uint32_t got[3];
    crc32c_x3(blocks, kChunk, got);
    for (int i = 0; i < 3; ++i) {
      if (got[i] != r.crc32c[k + i]) return mismatch(k + i);
    }
  }
  for (; k < k1; ++k) {
    const uint64_t c0 = r.begin + k * kChunk;
    const uint64_t c1 = std::min(c0 + kChunk, r.end);
    if (crc32c(buf + (c0 - a0), c1 - c0) != r.crc32c[k]) return mismatch(k);
  }
  *buf_offset = a0;
  return Status();
}

}  // namespace power
