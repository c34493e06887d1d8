// CpuContext: the thread pool and per-thread scratch the CPU kernels run with.
//
// One context per model replica. Scratch is sized once (max row length, max attention span)
// when the context is made, so no kernel allocates while decoding. Kernels that take a
// CpuContext split their work over its pool; a context is used by one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.h"

namespace power {

class CpuContext {
 public:
  // n_threads counts the caller (0 = all logical cores); max_row is the longest weight row
  // (elements) a matmul will see, max_span the longest attention span (KV positions).
  CpuContext(int n_threads, int64_t max_row, int64_t max_span);

  ThreadPool& pool() { return pool_; }
  int n_threads() const { return pool_.size(); }
  // Per-thread scratch of at least max_row floats / max_span floats.
  float* row_scratch(int thread) { return row_scratch_[static_cast<size_t>(thread)].data(); }
  float* span_scratch(int thread) { return span_scratch_[static_cast<size_t>(thread)].data(); }
  int64_t max_row() const { return max_row_; }
  int64_t max_span() const { return max_span_; }
  uint64_t scratch_bytes() const;
  // A 64-byte aligned buffer of at least `bytes` for the quantized activations of one matmul
  // call. It grows (reallocates) only when a call needs more than any call before, so steady
  // decoding does not allocate; the pointer is valid until the next call.
  uint8_t* act_scratch(uint64_t bytes);
  // Per-thread f32 scratch of at least `floats` for attention tiles (scores of a block of
  // queries over a span). Grows like act_scratch; each thread may only touch its own.
  float* tile_scratch(int thread, uint64_t floats);

 private:
  ThreadPool pool_;
  int64_t max_row_;
  int64_t max_span_;
  std::vector<std::vector<float>> row_scratch_;
  std::vector<std::vector<float>> span_scratch_;
  std::vector<uint8_t> act_scratch_;
  std::vector<std::vector<float>> tile_scratch_;
};

}  // namespace power
