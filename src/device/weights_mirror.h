// Partial weight mirrors: byte-identical copies of parts of a model's artifact on a fast local
// disk (docs/RESIDENCY.md, "Mirrors"), read by the streamer in place of the artifact.
//
// A mirror lives in DIR/sha256-<artifact digest>/: `data` holds byte ranges of the artifact,
// `index.json` (power.weights-mirror/1) says which (artifact offset, length, offset in `data`,
// SHA-256 of the range, CRC-32C of each 256 KiB chunk) and carries the per-tensor hash manifest
// of the whole artifact (name, type, shape, offset, length, SHA-256 per tensor). It is built
// under an exclusive lock on DIR/sha256-<digest>/.lock: the ranges are chosen by benefit per
// byte (the plan's streamed groups, read every pass, first in pass order; then its pinned ones,
// read once at load) under the byte cap and the free space the filesystem keeps beyond a
// reserve; copied into a temporary file, fsynced, read back and re-hashed, then published
// without replacing anything (link(2): data first, index last, so an index always describes a
// complete data file). A published generation is never modified. A later load whose cap and
// free space would let a rebuild hold more of its plan's streamed bytes than the newest
// generation holds (a cap raised, space freed) grows the mirror: generation g + 1
// (`index.<g+1>.json`, `data.<g+1>`; generation 1 is `index.json`, `data`) holds the old ranges and
// the new ones (or, when both do not fit, the new plan's), built the same way; once it is published
// the older one is unlinked, and processes that opened it keep reading it through their descriptor.
// Loads that would not gain streamed bytes use the newest generation whatever their budget.
//
// Reads check every chunk they cover against its CRC-32C. A read error, short read or mismatch
// is returned to the caller, which then reads the artifact (the streamer counts these).
// Thread-safety: after open_or_build, const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "device/residency.h"
#include "format/gguf.h"
#include "format/tensor_manifest.h"

namespace power {

struct MirrorOptions {
  std::string dir;                      // DIR: created if missing
  uint64_t max_bytes = UINT64_MAX;      // cap on a mirror's data bytes
  uint64_t reserve_bytes = 1ull << 30;  // free space the filesystem keeps beyond the mirror
  // Where the artifact's per-tensor hash manifest is cached (format/tensor_manifest.h): a build
  // takes the index's tensor digests from there, or hashes and caches them. Empty: no cache.
  std::string tensor_manifest_dir;
};

// A mirror's byte cap as a user gives it ("20G", "1.5GiB", "123456"; the units of a weights
// budget, device/residency.h, but no percentage); "" is no cap (UINT64_MAX).
Result<uint64_t> parse_mirror_bytes(std::string_view text);

class WeightsMirror {
 public:
  static constexpr std::string_view kSchema = "power.weights-mirror/1";
  static constexpr uint64_t kChunk = 256ull << 10;  // bytes per CRC-32C
  // A read covers whole chunks: a buffer for a span needs this many bytes beyond it.
  static constexpr uint64_t kReadSlack = 2 * kChunk;

  struct Range {
    uint64_t begin = 0, end = 0;   // in the artifact
    uint64_t data_offset = 0;      // in `data`
    std::string sha256;            // of the range's bytes
    std::vector<uint32_t> crc32c;  // per chunk of kChunk bytes from `begin`
  };

  // Opens DIR/sha256-<plan.artifact_sha256>/ or, when it has no index yet or `plan` would gain
  // from growing it, builds a generation from the artifact `file` was opened from (file.path())
  // for `plan`; a failed growth leaves the older generation serving (warned). Errors: the directory
  // cannot be created or locked (kIo), the artifact cannot be read (kIo, kCorrupt), an existing
  // index is unreadable or does not match the artifact (kCorrupt; it is left as it is), the copy
  // read back differs (kCorrupt). A mirror whose cap or free space leaves no room holds no ranges.
  static Result<std::unique_ptr<WeightsMirror>> open_or_build(const MirrorOptions& o,
                                                              const GgufFile& file,
                                                              const ResidencyPlan& plan);
  ~WeightsMirror();
  WeightsMirror(const WeightsMirror&) = delete;
  WeightsMirror& operator=(const WeightsMirror&) = delete;

  // Whether one range holds all of artifact bytes [begin, end).
  bool covers(uint64_t begin, uint64_t end) const;
  // Reads artifact bytes [begin, end) from the mirror into `buf` (buf_bytes >= end - begin +
  // kReadSlack): the chunks that cover the span, each checked. *buf_offset is the artifact
  // offset of buf[0]. kNotFound when no range holds the span; kIo, kCorrupt (short read,
  // checksum mismatch) otherwise.
  Status read(uint64_t begin, uint64_t end, uint8_t* buf, uint64_t buf_bytes,
              uint64_t* buf_offset) const;

  const std::string& dir() const { return dir_; }  // DIR/sha256-<digest>
  const std::vector<Range>& ranges() const { return ranges_; }
  const std::vector<TensorDigest>& tensors() const { return tensors_; }
  uint64_t data_bytes() const { return data_bytes_; }  // bytes of artifact ranges held
  bool built_now() const { return built_now_; }        // this call built (or grew) it
  int generation() const { return generation_; }       // 1 for the first build
  const std::string& data_path() const { return data_path_; }

 private:
  WeightsMirror() = default;
  // Reads generation `generation`'s index and opens its data.
  Status load_index(int generation, uint64_t artifact_bytes);
  // Copies ranges_ from the artifact into generation `generation` and publishes it.
  Status build(int generation, const std::string& artifact_path, uint64_t artifact_bytes);
  std::string dir_;
  std::string data_path_;
  int generation_ = 0;
  std::string artifact_sha256_;
  std::vector<Range> ranges_;  // sorted by begin, disjoint
  std::vector<TensorDigest> tensors_;
  uint64_t data_bytes_ = 0;
  bool built_now_ = false;
  int fd_ = -1;  // `data`
};

}  // namespace power
