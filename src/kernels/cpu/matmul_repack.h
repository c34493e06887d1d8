// Weight repacking for the CPU matmul: Q4_0, Q8_0 and Q4_K weight matrices copied once, at model
// load, into an 8-row interleaved layout that the SIMD kernels read faster than the ggml rows.
//
// Layout (private to src/kernels/cpu; matmul_repack.inc reads it): the rows are taken in
// groups of 8; group g holds, for each block b in row order (32 elements; Q4_K: 256), a record:
//   Q4_0 / Q8_0:
//     f16 d[8]                     the 8 rows' block scales
//     32-byte chunks c = 0..C-1    chunk c = for row i = 0..7: 4 bytes of row i's block
//                                  (Q4_0: qs[4c..4c+3], C = 4; Q8_0: q[4c..4c+3], C = 8)
//   Q4_K (1184 bytes):
//     f16 d[8], f16 dmin[8]        the 8 rows' super-block scales
//     u8 sc[8 sub-blocks][8 rows]  the 6-bit sub-block scales, unpacked
//     u8 m[4][8 rows][2]           the 6-bit mins, (m[2p], m[2p+1]) per row
//     32-byte chunks c = 0..31     as above: row i's qs[4c..4c+3] (nibbles of 8 elements)
// so one 256-bit load holds 8 rows x 4 quantized bytes, a broadcast 4 bytes of the activation
// block multiply all 8 rows at once, and the block's int32 sums come out as one vector of 8
// rows: the int->float convert, the scale product and the FMA (for Q4_K also the sub-block
// scales and the mins) happen once per 8 rows instead of once per row. Q4_K's record is 32
// bytes longer than its 8 rows in the file (2.8 %: the scales are stored as bytes). Rows past
// the last full group of 8 are not packed; matmul computes them from the original rows with
// the ggml-layout kernels.
//
// The original tensor stays mapped and unchanged: embedding-row lookups (matrix_row_f32), the
// scalar path (POWER_FORCE_ISA=scalar) and any other reader keep reading it. matmul() finds
// the packed copy of a weight through a process-wide registry keyed by the view's data pointer
// and checked against its type, shape and row stride; a view that does not match exactly (a
// sub-view of some rows, another stride) simply takes the unpacked path.
//
// Memory: the packed copy is anonymous memory of the size of the packed rows (Q4_0: 18 bytes
// per 32 weights, Q8_0: 34, i.e. the file's bytes; Q4_K: 148 per 256, the file's 144 + 4).
// The copies one add_all() call makes share one 2 MiB-aligned region advised for transparent
// huge pages (base/huge_pages.h; POWER_HUGEPAGES=0 leaves it in 4 KiB pages): decode streams
// through every copy once per token, and with 4 KiB pages that stream pays a page walk per
// 4 KiB (1.1B Q4_K_M on an AMD EPYC VM, 1 thread: 16.5 tok/s, unstable, vs 34-35 tok/s). The
// region is released with the last copy in it;
// the mapped file pages it was copied
// from are read once and then stay in the page cache (reclaimable, counted in RSS until the
// kernel drops them).
//
// POWER_REPACK=0 (or off/false/no) in the environment disables repacking (A/B measurements,
// memory-constrained hosts); it is read when weights are added.
//
// Thread-safety: add() and the destructor lock the registry; matmul() may run concurrently
// with the loading or unloading of other models. A RepackedWeights must outlive the matmul
// calls on its weights (the owning model does).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace power {

namespace kernels {
struct PackedMatrix;
}

class RepackedWeights {
 public:
  RepackedWeights() = default;
  ~RepackedWeights();
  RepackedWeights(const RepackedWeights&) = delete;
  RepackedWeights& operator=(const RepackedWeights&) = delete;

  // Packs `w` when repacking is enabled, the active ISA has packed kernels and the type has a
  // packed layout (Q4_0, Q8_0, Q4_K; 2-D, at least 8 rows). Returns true when `w` is now served
  // from a packed copy (also when another owner had already packed the same view: the copy is
  // shared and lives until its last owner is gone).
  bool add(const TensorView& w);
  // add() for many views at once, their new copies in one huge-page region. Returns how many
  // of `ws` are now served from packed copies. A loader passes all its matrices in one call.
  // `packed_one`, when given, is called with each view this call packs, right after its copy
  // is made (a loader that will not read the source again drops its pages there, so that the
  // source and every copy are not resident at once; rows past the last full group of 8 are
  // still read from the source).
  int64_t add_all(std::span<const TensorView> ws,
                  const std::function<void(const TensorView&)>& packed_one = {});

  int64_t n_matrices() const { return static_cast<int64_t>(keys_.size()); }
  // Bytes of packed copies this owner registered (shared copies counted by each owner).
  uint64_t bytes() const { return bytes_; }
  // Bytes of the regions this owner allocated and advised MADV_HUGEPAGE (whether the kernel
  // backs them with huge pages is its choice: process_huge_page_usage() tells).
  uint64_t huge_advised_bytes() const { return huge_bytes_; }

 private:
  std::vector<const void*> keys_;
  uint64_t bytes_ = 0;
  uint64_t huge_bytes_ = 0;
};

// True when weight type `type` has a packed layout and kernel on the active ISA.
bool matmul_repack_supported(GgmlType type);
// False when POWER_REPACK disables repacking.
bool matmul_repack_enabled();
// True when matmul(w, ...) will run the packed kernels for `w` (tests, diagnostics).
bool matmul_uses_repacked(const TensorView& w);
// The bytes of the registry's packed copy of `w` (empty when it has none): what a loader
// locks in RAM (mlock) beside the source rows the kernels still read.
std::span<const uint8_t> packed_copy_bytes(const TensorView& w);

namespace kernels {
// The registered packed copy matching `w` exactly, or null. Used by matmul().
std::shared_ptr<const PackedMatrix> find_packed(const TensorView& w);
}  // namespace kernels

// Packed copies outside the registry (the residency manager packs streamed weights into its
// staging slots as they arrive, so that matmul runs the same kernels, bit for bit, as on a
// resident packed copy). packed_bytes() is what make_packed() writes (0: `w` is not packed
// under the active ISA and POWER_REPACK); make_packed() packs `w` into `mem` (64-byte
// aligned, packed_bytes(w) long, kept alive by the result) and returns the matmul hint.
uint64_t packed_bytes(const TensorView& w);
std::shared_ptr<const kernels::PackedMatrix> make_packed(const TensorView& w,
                                                         std::shared_ptr<uint8_t> mem);

}  // namespace power
