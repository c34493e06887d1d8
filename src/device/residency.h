// Weights residency: a budget for the bytes of weights kept in memory, a plan of which tensors
// stay resident and which are streamed from the artifact, and the streamer that reads the
// streamed ones ahead of the compute (docs/RESIDENCY.md).
//
// The plan (plan_residency) is computed at load, deterministic for (tensors, budget,
// artifact), and digest-bound to both. Tiers:
//   pinned    the kernels read the tensor's resident form: the packed copy of a Q4_0 / Q8_0 /
//             Q4_K matrix, the f32 copy of a vector (norms, biases: always pinned), or the
//             mapped file pages for other types;
//   rows      tables used only for row lookups (token embeddings): the rows a pass uses are
//             read from the mapping; nothing is charged to the budget for them;
//   streamed  read with pread (O_DIRECT where the filesystem allows) into a staging slot before
//             the pass needs it, packed there exactly as a pinned copy is (so the kernels and
//             the bits are the same), and dropped from the page cache after the read.
// Pinning takes whole groups (a block's matrices; each matrix outside the blocks is its own
// group) from the front of the pass, then from its back, while they fit, so that the streamed
// groups are one run in the middle: one sequential read per pass.
//
// The streamer (WeightStreamer) keeps `slots` staging slots of the largest streamed group's
// resident size; an I/O thread fills them, the group a pass needs first, then `lookahead`
// groups after it in pass order (cyclic: the next pass starts over). Requests for a group that
// is loading or loaded are merged; a pass waits only for the group it needs. A read error or
// a short read fails the op that needed the group (the next pass tries again).
// With a partial mirror (device/weights_mirror.h), a group the mirror holds is read from it and
// checked; a failed or mismatching mirror read is counted and the group read from the artifact.
//
// Tensor identity does not change: the bytes a streamed slot holds are the artifact's bytes of
// that tensor, and the packed form is made by the same code as the resident one.
// Thread-safety: plan functions are pure; a WeightStreamer is shared by every pass of its
// model (each pass has its own Cursor) and is internally locked.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "kernels/cpu/matmul.h"
#include "tensor/tensor.h"

namespace power {

enum class WeightTier : uint8_t { kPinned, kRows, kStreamed };
std::string_view weight_tier_name(WeightTier t);

// A weights budget as a user gives it: bytes ("123456", "800M", "1.5GiB") or a percentage of
// the model's resident size ("50%"). Unset: the caller's default.
struct WeightsBudget {
  bool set = false;
  bool percent = false;
  double value = 0;  // bytes, or per cent
  // The bytes for a model whose resident size is `total`.
  uint64_t resolve(uint64_t total) const;
  std::string to_string() const;
};
Result<WeightsBudget> parse_weights_budget(std::string_view text);

// What the planner knows of one bound tensor.
struct ResidencyTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> shape;
  uint64_t file_offset = 0;     // absolute, in the artifact
  uint64_t file_bytes = 0;      // its bytes there
  uint64_t resident_bytes = 0;  // its resident form (packed copy, f32 copy, or file bytes)
  bool small = false;           // a vector (norm, bias): always pinned
  bool rows_only = false;       // used only for row lookups
};

struct ResidencyGroup {
  std::string name;          // "blk.7", the tensor's name, or "NAME[r0:r1]" for a piece
  std::vector<int> members;  // indices into ResidencyPlan::tensors
  uint64_t resident_bytes = 0;
  uint64_t file_begin = 0, file_end = 0;  // the span of its members in the artifact
  // A piece of one streamed matrix: its rows [row_begin, row_end) (row_end 0: whole members).
  // A streamed matrix outside the blocks that is larger than the largest block (the output
  // layer) is split into pieces of whole groups of 8 rows, each no larger than that block, so
  // the staging slots are sized by a block, not by the largest matrix.
  int64_t row_begin = 0, row_end = 0;
};

struct ResidencyPlan {
  static constexpr std::string_view kSchema = "power.residency-plan/1";
  std::string artifact_sha256;
  uint64_t budget_bytes = 0;         // UINT64_MAX: no budget
  uint64_t total_bytes = 0;          // resident size of everything (the size a budget % refers to)
  uint64_t small_bytes = 0;          // always pinned
  uint64_t pinned_bytes = 0;         // everything pinned (small included)
  uint64_t streamed_bytes = 0;       // resident size of the streamed groups
  uint64_t streamed_file_bytes = 0;  // bytes read from the artifact per pass
  std::vector<ResidencyTensor> tensors;
  std::vector<WeightTier> tier;        // per tensor
  std::vector<int> group_of;           // per tensor: its (first) streamed group, or -1
  std::vector<int> pieces;             // per tensor: its streamed groups (consecutive), or 0
  std::vector<ResidencyGroup> groups;  // every group in pass order
  std::vector<int> streamed;           // the streamed groups (indices into groups), pass order
  std::string digest;                  // SHA-256 of the canonical JSON of the above

  bool streams() const { return !streamed.empty(); }
  nlohmann::json to_json() const;
  std::string to_text() const;
};

// Plans `tensors` (in any order) under `budget_bytes` for the artifact `artifact_sha256`.
ResidencyPlan plan_residency(std::vector<ResidencyTensor> tensors, uint64_t budget_bytes,
                             std::string artifact_sha256);

struct StreamStats {
  uint64_t loads = 0;            // groups read
  uint64_t bytes_read = 0;       // from the artifact
  uint64_t acquires = 0;         // group switches of passes
  uint64_t ready_hits = 0;       // ... that found the group loaded
  uint64_t waits = 0;            // ... that waited for it
  uint64_t wait_ns = 0;          // compute time spent waiting for reads
  uint64_t prefetch_loads = 0;   // loads issued ahead of need
  uint64_t prefetch_useful = 0;  // ... that a pass then used
  uint64_t prefetch_unused = 0;  // ... evicted unused
  uint64_t read_errors = 0;
  uint64_t mirror_loads = 0;       // groups read from the mirror (device/weights_mirror.h)
  uint64_t mirror_bytes_read = 0;  // ... and their bytes (not in bytes_read)
  uint64_t mirror_fallbacks = 0;   // mirror reads that failed (error, short, checksum): read
                                   // from the artifact instead
  bool direct_io = false;          // reads bypass the page cache (O_DIRECT)
};

class WeightsMirror;

class WeightStreamer {
 public:
  // `path`: the artifact. `views`: the mapping's view of each plan tensor. lookahead 0..4.
  // `mirror` (optional, outlives the streamer): groups it holds are read from it, and from the
  // artifact when that read fails.
  static Result<std::unique_ptr<WeightStreamer>> create(const std::string& path,
                                                        const ResidencyPlan& plan,
                                                        const std::vector<TensorView>& views,
                                                        int lookahead, int slots = 0,
                                                        const WeightsMirror* mirror = nullptr);
  ~WeightStreamer();
  WeightStreamer(const WeightStreamer&) = delete;
  WeightStreamer& operator=(const WeightStreamer&) = delete;

  // One pass's position: the slot it holds (at most one at a time).
  struct Cursor {
    int slot = -1;
    int group = -1;
  };
  struct Lease {
    const TensorView* view = nullptr;    // the tensor's bytes (or its piece's rows) in the slot
    const PackedHint* packed = nullptr;  // its packed copy there (null when not packed)
    int64_t row_begin = 0;               // the first row of the tensor the view holds
  };
  // The tensor `tensor` (a plan index) of streamed group `group` (a plan group index),
  // waiting for its read. The cursor keeps the slot until it moves to another group or
  // release().
  Result<Lease> acquire(Cursor& c, int group, int tensor);
  void release(Cursor& c);

  StreamStats stats() const;
  uint64_t staging_bytes() const { return staging_bytes_; }
  // The staging slots' and read buffers' memory (staging_bytes() in all), for mlock.
  std::vector<std::span<const uint8_t>> staging_regions() const;
  int lookahead() const { return lookahead_; }
  int slot_count() const { return static_cast<int>(slots_.size()); }

 private:
  struct Member {
    int tensor = -1;
    TensorView view;
    PackedHint packed;
    int64_t row_begin = 0;
  };
  // Member `m` of group `g` as the mapping holds it (a piece: its rows), and its file offset.
  TensorView member_view(const ResidencyGroup& g, int m, uint64_t* file_offset) const;
  struct Slot {
    std::shared_ptr<uint8_t> mem;
    int group = -1;
    enum State { kEmpty, kLoading, kReady, kFailed } state = kEmpty;
    int refs = 0;
    bool prefetched = false;  // loaded ahead and not yet used
    Status error;
    std::vector<Member> members;
  };
  WeightStreamer() = default;
  void io_loop(int worker);
  // On I/O worker `worker` (its read buffer), without the lock. *from_mirror: the bytes came
  // from the mirror; *mirror_error: why a mirror read failed (the artifact was read instead).
  Status load(Slot& s, int group, int worker, bool* from_mirror, Status* mirror_error);
  int slot_of(int group) const;  // under mu_
  // Under mu_: a slot to load into, -1 when none is free. need_group >= 0: a pass needs it now
  // (may evict a group wanted later); -1: a read ahead (evicts only groups no pass wants).
  int pick_victim(int need_group);
  bool wanted(int group) const;  // under mu_: within some cursor's lookahead

  const ResidencyPlan* plan_ = nullptr;
  const WeightsMirror* mirror_ = nullptr;
  std::vector<TensorView> views_;
  std::vector<int> order_;  // position of each plan group in the streamed order (-1: none)
  int fd_ = -1, direct_fd_ = -1;
  std::atomic<bool> direct_ok_{false};  // direct reads allowed (cleared on EINVAL)
  int lookahead_ = 0;
  uint64_t slot_bytes_ = 0, staging_bytes_ = 0;
  std::vector<std::shared_ptr<uint8_t>> io_bufs_;  // one per I/O worker
  uint64_t io_buf_bytes_ = 0;
  std::vector<Slot> slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_;     // slot state changes, releases
  std::condition_variable io_cv_;  // work for the I/O thread
  std::deque<int> queue_;          // slots to load
  std::vector<int> heads_;         // streamed positions of the passes acquiring or holding
  bool stop_ = false;
  StreamStats stats_;
  std::vector<std::thread> io_;  // I/O workers: one group load each at a time
};

}  // namespace power
