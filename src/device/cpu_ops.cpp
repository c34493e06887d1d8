#include "device/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "device/cpu_ops_internal.h"
#include "device/weights_cache.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "tensor/half.h"

namespace power {
namespace {

using cpu_ops::for_each_row;
using sdk::Act;
using sdk::Op;

using cpu_ops::bound;
using cpu_ops::values_of;
using cpu_ops::values_size;

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// The tanh form of GELU (ggml_gelu), in double.
float gelu_tanh(float u) {
  constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;
  const double x = u;
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))));
}

float gelu_erf(float u) {
  const double x = u;
  return static_cast<float>(0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)));
}

// ggml's GELU table entry for the f16 value of x (ggml_gelu_f32 on the f16 input, rounded to
// f16), with its cut-offs.
float gelu_tanh_f16(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  const float h = f16_to_f32(f32_to_f16(x));
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float g = 0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + kCoefA * h * h)));
  return f16_to_f32(f32_to_f16(g));
}

float activate_one(float x, sdk::Activation a) {
  switch (a) {
    case sdk::Activation::kSilu:
      return x / (1.0f + std::exp(-x));
    case sdk::Activation::kGeluTanh:
      return gelu_tanh(x);
    case sdk::Activation::kGeluErf:
      return gelu_erf(x);
    case sdk::Activation::kRelu:
      return x > 0.0f ? x : 0.0f;
    case sdk::Activation::kGeluTanhF16:
      return gelu_tanh_f16(x);
  }
  return x;
}

// Rows of a quantized matrix decoded to f32 at a time for exact products.
constexpr int64_t kExactTileRows = 128;

}  // namespace

bool CpuOps::start(Op op) {
  if (!status_.ok()) return false;
  const auto i = static_cast<size_t>(op);
  if (i >= declared_.size() || !declared_[i]) {
    fail(op, Status(StatusCode::kInvalidArgument, "op used but not declared in the model's spec"));
    return false;
  }
  return true;
}

void CpuOps::fail(Op op, Status st) {
  if (status_.ok()) status_ = std::move(st.with("op", sdk::op_name(op)));
}

int64_t CpuOps::buffer_rows(int32_t buffer) const {
  if (buffer == kOutputBuffer) return ws_.n_outputs;
  if (buffer == kHiddenInBuffer) return ws_.hidden_in != nullptr ? ws_.n_tokens : 0;
  return ws_.max_tokens;
}

bool CpuOps::valid(Op op, const Act& a, const char* what) {
  int64_t width = 0;
  if (a.buffer == kOutputBuffer) {
    width = ws_.output_ld;
  } else if (a.buffer == kHiddenInBuffer) {
    width = ws_.hidden_in_ld;
  } else if (a.buffer >= 0 && static_cast<size_t>(a.buffer) < ws_.buffers.size()) {
    width = ws_.widths[static_cast<size_t>(a.buffer)];
  } else {
    fail(op, Status(StatusCode::kInvalidArgument, "activation of no planned buffer")
                 .with("argument", what)
                 .with("buffer", a.buffer));
    return false;
  }
  if (a.rows < 0 || a.cols < 0 || a.col0 < 0 || a.ld != width || a.col0 + a.cols > width ||
      a.rows > buffer_rows(a.buffer)) {
    fail(op, Status(StatusCode::kInvalidArgument, "activation outside its buffer")
                 .with("argument", what)
                 .with("rows", a.rows)
                 .with("cols", a.cols)
                 .with("col0", a.col0)
                 .with("buffer_width", width)
                 .with("buffer_rows", buffer_rows(a.buffer)));
    return false;
  }
  return true;
}

float* CpuOps::row(const Act& a, int64_t r) const {
  float* base;
  if (a.buffer == kOutputBuffer) {
    base = ws_.output;
  } else if (a.buffer == kHiddenInBuffer) {
    base = const_cast<float*>(ws_.hidden_in);
  } else {
    base = ws_.buffers[static_cast<size_t>(a.buffer)].data();
  }
  return base + r * a.ld + a.col0;
}

bool CpuOps::weight_bytes(Op op, const BoundWeight& b, const TensorView** view,
                          const PackedHint** packed, int piece, int64_t* row_begin) {
  *view = &b.view;
  *packed = nullptr;
  if (row_begin != nullptr) *row_begin = 0;
  if (b.stream_group < 0) return true;
  if (ws_.streamer == nullptr) {
    fail(
        op,
        Status(StatusCode::kInternal, "streamed weight without a streamer").with("tensor", b.name));
    return false;
  }
  auto lease = ws_.streamer->acquire(ws_.stream_cursor, b.stream_group + piece, b.stream_tensor);
  if (!lease.ok()) {
    fail(op, Status(lease.status()).with("tensor", b.name));
    return false;
  }
  *view = lease->view;
  *packed = lease->packed;
  if (row_begin != nullptr) *row_begin = lease->row_begin;
  return true;
}

void CpuOps::embed(const sdk::Weight& table, sdk::Index ids, Act out) {
  if (!start(Op::kEmbed) || !valid(Op::kEmbed, out, "out")) return;
  if (!table || out.cols != table.ne[0] || out.rows != ws_.n_tokens) {
    fail(Op::kEmbed, Status(StatusCode::kInvalidArgument, "table row length or rows mismatch")
                         .with("out_cols", out.cols)
                         .with("row_length", table.ne[0]));
    return;
  }
  const BoundWeight& w = *bound(table);
  const std::vector<int32_t>& src = ids == sdk::Index::kTokens ? ws_.token_ids : ws_.pos;
  for (int64_t t = 0; t < out.rows; ++t) {
    const int32_t id = src[static_cast<size_t>(t)];
    if (id < 0 || id >= w.view.n_rows()) {
      fail(Op::kEmbed, Status(StatusCode::kOutOfRange, "row index beyond the table")
                           .with("tensor", w.name)
                           .with("index", id)
                           .with("rows", w.view.n_rows()));
      return;
    }
    if (w.cached_rows == nullptr) {
      matrix_row_f32(w.view, id, row(out, t));
      continue;
    }
    // The row's bytes from the weights cache (or the artifact), decoded as the mapping's are.
    thread_local std::vector<uint8_t> bytes;
    bytes.resize(w.cached_rows->row_bytes());
    if (Status st = w.cached_rows->read(id, bytes.data()); !st.ok()) {
      fail(Op::kEmbed, st.with("tensor", w.name));
      return;
    }
    TensorView one = w.view;
    one.data = bytes.data();
    one.ne[1] = 1;
    matrix_row_f32(one, 0, row(out, t));
  }
}

void CpuOps::linear(const sdk::Weight& w, const sdk::Weight* bias, Act in, Act out,
                    sdk::Precision precision) {
  if (!start(Op::kLinear) || !valid(Op::kLinear, in, "in") || !valid(Op::kLinear, out, "out")) {
    return;
  }
  if (!w || in.cols != w.ne[0] || out.cols != w.ne[1] || in.rows != out.rows ||
      (values_of(bias) != nullptr && values_size(bias) != out.cols)) {
    fail(Op::kLinear, Status(StatusCode::kInvalidArgument, "shapes do not match the weight")
                          .with("tensor", w ? bound(w)->name : std::string("(none)"))
                          .with("in_cols", in.cols)
                          .with("out_cols", out.cols)
                          .with("weight", fmt::format("[{}, {}]", w.ne[0], w.ne[1])));
    return;
  }
  const int64_t k = w.ne[0], n_out = w.ne[1], n = in.rows;
  if (n == 0) return;
  float* y = row(out, 0);
  const float* x = row(in, 0);
  if (precision == sdk::Precision::kDefault || is_float_type(bound(w)->view.type)) {
    // A matrix streamed in row pieces: each piece's rows into their columns of `out` (one
    // output's arithmetic does not depend on which rows share the call).
    const int pieces = std::max(1, bound(w)->stream_pieces);
    for (int p = 0; p < pieces; ++p) {
      const TensorView* wv = nullptr;
      const PackedHint* packed = nullptr;
      int64_t r0 = 0;
      if (!weight_bytes(Op::kLinear, *bound(w), &wv, &packed, p, &r0)) return;
      matmul(ws_.cpu, *wv, x, in.ld, n, y + r0, out.ld, packed != nullptr ? *packed : PackedHint());
    }
  } else {
    // Exact: tiles of kExactTileRows rows decoded to f32 (in parallel), multiplied by the float
    // path; in that kernel one (row, token) product does not depend on the tiling. The rows
    // are decoded from the mapped artifact (a streamed weight's bytes are the same there).
    const TensorView& view = bound(w)->view;
    float* tile = ws_.exact_tile(static_cast<uint64_t>(kExactTileRows * k));
    for (int64_t r0 = 0; r0 < n_out; r0 += kExactTileRows) {
      const int64_t nr = std::min(kExactTileRows, n_out - r0);
      ws_.cpu.pool().parallel_for(static_cast<size_t>(nr), [&](size_t begin, size_t end, int) {
        for (size_t r = begin; r < end; ++r) {
          matrix_row_f32(view, r0 + static_cast<int64_t>(r), tile + static_cast<int64_t>(r) * k);
        }
      });
      const int64_t shape[2] = {k, nr};
      auto tv = TensorView::contiguous(GgmlType::F32, shape, tile,
                                       static_cast<uint64_t>(nr * k) * sizeof(float));
      POWER_CHECK(tv.ok());
      matmul(ws_.cpu, *tv, x, in.ld, n, y + r0, out.ld);
    }
  }
  if (const float* b = values_of(bias)) {
    for (int64_t t = 0; t < n; ++t) add_inplace(y + t * out.ld, b, n_out);
  }
}

void CpuOps::linear_many(std::span<const sdk::LinearJob> jobs, Act in) {
  if (!start(Op::kLinear) || !valid(Op::kLinear, in, "in") || jobs.empty()) return;
  constexpr size_t kMaxJobs = 8;
  if (jobs.size() > kMaxJobs) {
    fail(Op::kLinear, Status(StatusCode::kInvalidArgument, "more than 8 products of one input")
                          .with("jobs", jobs.size()));
    return;
  }
  // Streamed weights of different groups, or a matrix streamed in row pieces, cannot be held
  // at once (a pass holds one staging slot): one product at a time.
  int32_t group = -1;
  for (const sdk::LinearJob& job : jobs) {
    if (job.w == nullptr || !*job.w) continue;
    const int32_t g = bound(*job.w)->stream_group;
    if (g >= 0 && ((group >= 0 && g != group) || bound(*job.w)->stream_pieces > 1)) {
      for (const sdk::LinearJob& one : jobs) {
        linear(*one.w, one.bias, in, one.out, sdk::Precision::kDefault);
      }
      return;
    }
    if (g >= 0) group = g;
  }
  MatmulJob mm[kMaxJobs];
  for (size_t j = 0; j < jobs.size(); ++j) {
    const sdk::LinearJob& job = jobs[j];
    if (!valid(Op::kLinear, job.out, "out")) return;
    if (job.w == nullptr || !*job.w || in.cols != job.w->ne[0] || job.out.cols != job.w->ne[1] ||
        job.out.rows != in.rows ||
        (values_of(job.bias) != nullptr && values_size(job.bias) != job.out.cols)) {
      fail(Op::kLinear, Status(StatusCode::kInvalidArgument, "shapes do not match the weight")
                            .with("job", j)
                            .with("in_cols", in.cols)
                            .with("out_cols", job.out.cols));
      return;
    }
    const TensorView* wv = nullptr;
    const PackedHint* packed = nullptr;
    if (!weight_bytes(Op::kLinear, *bound(*job.w), &wv, &packed)) return;
    mm[j] = {wv, row(job.out, 0), job.out.ld, packed};
  }
  if (in.rows == 0) return;
  matmul_same_input(ws_.cpu, std::span<const MatmulJob>(mm, jobs.size()), row(in, 0), in.ld,
                    in.rows);
  for (const sdk::LinearJob& job : jobs) {
    const float* b = values_of(job.bias);
    if (b == nullptr) continue;
    for (int64_t t = 0; t < in.rows; ++t) add_inplace(row(job.out, t), b, job.out.cols);
  }
}

void CpuOps::rms_norm(Act in, const sdk::Weight* w, Act out, float eps, int64_t group) {
  if (!start(Op::kRmsNorm) || !valid(Op::kRmsNorm, in, "in") || !valid(Op::kRmsNorm, out, "out")) {
    return;
  }
  const int64_t g = group > 0 ? group : in.cols;
  const float* wv = values_of(w);
  if (in.rows != out.rows || in.cols != out.cols || g == 0 || in.cols % g != 0 ||
      (wv != nullptr && values_size(w) != g)) {
    fail(Op::kRmsNorm, Status(StatusCode::kInvalidArgument, "shapes do not match")
                           .with("in_cols", in.cols)
                           .with("out_cols", out.cols)
                           .with("group", g)
                           .with("weight_size", values_size(w)));
    return;
  }
  const int64_t n_groups = in.cols / g;
  for_each_row(ws_, in.rows, [&](int64_t t) {
    const float* x = row(in, t);
    float* y = row(out, t);
    for (int64_t h = 0; h < n_groups; ++h) power::rms_norm(x + h * g, wv, y + h * g, g, eps);
  });
}

void CpuOps::layer_norm(Act in, const sdk::Weight* w, const sdk::Weight* b, Act out, float eps,
                        int64_t group) {
  if (!start(Op::kLayerNorm) || !valid(Op::kLayerNorm, in, "in") ||
      !valid(Op::kLayerNorm, out, "out")) {
    return;
  }
  const int64_t g = group > 0 ? group : in.cols;
  const float* wv = values_of(w);
  const float* bv = values_of(b);
  if (in.rows != out.rows || in.cols != out.cols || g == 0 || in.cols % g != 0 ||
      (wv != nullptr && values_size(w) != g) || (bv != nullptr && values_size(b) != g)) {
    fail(Op::kLayerNorm, Status(StatusCode::kInvalidArgument, "shapes do not match")
                             .with("in_cols", in.cols)
                             .with("group", g));
    return;
  }
  const double e = eps;
  const int64_t n_groups = in.cols / g;
  // Mean and (biased) variance in double; each output element is computed in double from
  // its input element before it is written (in and out may be the same).
  auto norm = [&](const float* x, float* y) {
    double sum = 0.0;
    for (int64_t i = 0; i < g; ++i) sum += x[i];
    const double mean = sum / static_cast<double>(g);
    double var = 0.0;
    for (int64_t i = 0; i < g; ++i) {
      const double d = x[i] - mean;
      var += d * d;
    }
    var /= static_cast<double>(g);
    const double inv = 1.0 / std::sqrt(var + e);
    for (int64_t i = 0; i < g; ++i) {
      double v = (x[i] - mean) * inv;
      if (wv != nullptr) v = v * wv[i];
      if (bv != nullptr) v = v + bv[i];
      y[i] = static_cast<float>(v);
    }
  };
  ws_.cpu.pool().parallel_for(static_cast<size_t>(in.rows), [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      const float* x = row(in, static_cast<int64_t>(t));
      float* y = row(out, static_cast<int64_t>(t));
      for (int64_t h = 0; h < n_groups; ++h) norm(x + h * g, y + h * g);
    }
  });
}

void CpuOps::rope(Act x, int64_t head_dim, const sdk::Rope& r) {
  if (!start(Op::kRope) || !valid(Op::kRope, x, "x")) return;
  const float* factors = values_of(&r.freq_factors);
  if (head_dim <= 0 || x.cols % head_dim != 0 || r.n_rot < 0 || r.n_rot % 2 != 0 ||
      r.n_rot > head_dim || x.rows > ws_.n_tokens ||
      (factors != nullptr && values_size(&r.freq_factors) < r.n_rot / 2)) {
    fail(Op::kRope, Status(StatusCode::kInvalidArgument, "bad rope shape")
                        .with("cols", x.cols)
                        .with("head_dim", head_dim)
                        .with("n_rot", r.n_rot));
    return;
  }
  RopeParams p;
  p.kind = r.mode == sdk::RopeMode::kNorm ? RopeKind::kNorm : RopeKind::kNeox;
  p.n_rot = r.n_rot;
  p.freq_base = r.freq_base;
  p.freq_scale = r.freq_scale;
  p.freq_factors = factors;
  const int64_t n_heads = x.cols / head_dim;
  // Over the compute threads, as the norms: one token's angles (pow, sincos per pair of
  // dimensions) are a few microseconds, a 512-token prompt's on one thread held the others.
  for_each_row(ws_, x.rows, [&](int64_t t) {
    rope_apply_heads(row(x, t), n_heads, head_dim, ws_.pos[static_cast<size_t>(t)], p);
  });
}

void CpuOps::activate(Act x, sdk::Activation a) {
  if (!start(Op::kActivation) || !valid(Op::kActivation, x, "x")) return;
  for_each_row(ws_, x.rows, [&](int64_t t) {
    float* r = row(x, t);
    for (int64_t i = 0; i < x.cols; ++i) r[i] = activate_one(r[i], a);
  });
}

void CpuOps::glu(Act gate, Act up, sdk::Activation a) {
  if (!start(Op::kGlu) || !valid(Op::kGlu, gate, "gate") || !valid(Op::kGlu, up, "up")) return;
  if (gate.rows != up.rows || gate.cols != up.cols) {
    fail(Op::kGlu, Status(StatusCode::kInvalidArgument, "gate and up differ in shape")
                       .with("gate_cols", gate.cols)
                       .with("up_cols", up.cols));
    return;
  }
  const int64_t n_ff = gate.cols;
  if (a != sdk::Activation::kSilu) {
    for_each_row(ws_, gate.rows, [&](int64_t t) {
      float* g = row(gate, t);
      const float* u = row(up, t);
      for (int64_t i = 0; i < n_ff; ++i) g[i] = activate_one(g[i], a) * u[i];
    });
    return;
  }
  // SwiGLU: pieces of at most 1024 elements of one row, so one decode token is split over
  // the threads too (exp per element: ~10 us per piece).
  constexpr int64_t kPiece = 1024;
  const int64_t per_row = (n_ff + kPiece - 1) / kPiece;
  const int64_t pieces = gate.rows * per_row;
  auto run = [&](int64_t i) {
    const int64_t t = i / per_row, b = (i % per_row) * kPiece;
    swiglu(row(gate, t) + b, row(up, t) + b, std::min(kPiece, n_ff - b));
  };
  if (pieces <= 1) {
    if (pieces == 1) run(0);
    return;
  }
  ws_.cpu.pool().parallel_for(static_cast<size_t>(pieces), [&](size_t b, size_t e, int) {
    for (size_t i = b; i < e; ++i) run(static_cast<int64_t>(i));
  });
}

void CpuOps::add(Act x, Act y) {
  if (!start(Op::kAdd) || !valid(Op::kAdd, x, "x") || !valid(Op::kAdd, y, "y")) return;
  if (x.rows != y.rows || x.cols != y.cols) {
    fail(Op::kAdd, Status(StatusCode::kInvalidArgument, "x and y differ in shape"));
    return;
  }
  if (x.rows == 0) return;
  if (x.ld == x.cols && y.ld == y.cols && x.col0 == 0 && y.col0 == 0) {
    add_inplace(row(x, 0), row(y, 0), x.rows * x.cols);
    return;
  }
  for (int64_t t = 0; t < x.rows; ++t) add_inplace(row(x, t), row(y, t), x.cols);
}

void CpuOps::mul(Act x, Act y) {
  if (!start(Op::kMul) || !valid(Op::kMul, x, "x") || !valid(Op::kMul, y, "y")) return;
  if (x.rows != y.rows || x.cols != y.cols) {
    fail(Op::kMul, Status(StatusCode::kInvalidArgument, "x and y differ in shape"));
    return;
  }
  for (int64_t t = 0; t < x.rows; ++t) {
    float* a = row(x, t);
    const float* b = row(y, t);
    for (int64_t i = 0; i < x.cols; ++i) a[i] *= b[i];
  }
}

void CpuOps::scale(Act x, float s) {
  if (!start(Op::kScale) || !valid(Op::kScale, x, "x")) return;
  for (int64_t t = 0; t < x.rows; ++t) {
    float* a = row(x, t);
    for (int64_t i = 0; i < x.cols; ++i) a[i] *= s;
  }
}

void CpuOps::add_row(Act x, const sdk::Weight& w, int64_t r) {
  if (!start(Op::kAddRow) || !valid(Op::kAddRow, x, "x")) return;
  if (!w || w.ne[0] != x.cols || r < 0 || r >= w.n_rows()) {
    fail(Op::kAddRow, Status(StatusCode::kInvalidArgument, "row length or index mismatch")
                          .with("cols", x.cols)
                          .with("row", r));
    return;
  }
  const BoundWeight& b = *bound(w);
  const float* v;
  if (!b.f32.empty()) {
    v = b.f32.data() + r * x.cols;
  } else {
    matrix_row_f32(b.view, r, ws_.row_tmp());
    v = ws_.row_tmp();
  }
  for (int64_t t = 0; t < x.rows; ++t) add_inplace(row(x, t), v, x.cols);
}

void CpuOps::softmax(Act x) {
  if (!start(Op::kSoftmax) || !valid(Op::kSoftmax, x, "x")) return;
  for_each_row(ws_, x.rows, [&](int64_t t) { power::softmax(row(x, t), x.cols); });
}

void CpuOps::copy(Act src, Act dst) {
  if (!start(Op::kCopy) || !valid(Op::kCopy, src, "src") || !valid(Op::kCopy, dst, "dst")) return;
  if (src.rows != dst.rows || src.cols != dst.cols) {
    fail(Op::kCopy, Status(StatusCode::kInvalidArgument, "src and dst differ in shape"));
    return;
  }
  for (int64_t t = 0; t < src.rows; ++t) {
    std::memcpy(row(dst, t), row(src, t), static_cast<size_t>(src.cols) * sizeof(float));
  }
}

void CpuOps::select_output_rows(Act in, Act out) {
  if (!start(Op::kSelectRows) || !valid(Op::kSelectRows, in, "in") ||
      !valid(Op::kSelectRows, out, "out")) {
    return;
  }
  if (in.cols != out.cols || out.rows != ws_.n_outputs || in.rows != ws_.n_tokens) {
    fail(Op::kSelectRows, Status(StatusCode::kInvalidArgument, "shapes do not match the batch")
                              .with("out_rows", out.rows)
                              .with("outputs", ws_.n_outputs));
    return;
  }
  for (int64_t r = 0; r < ws_.n_outputs; ++r) {
    std::memcpy(row(out, r), row(in, ws_.output_rows[static_cast<size_t>(r)]),
                static_cast<size_t>(in.cols) * sizeof(float));
  }
}

void CpuOps::pool(Act in, sdk::Pooling p, Act out) {
  if (!start(Op::kPool) || !valid(Op::kPool, in, "in") || !valid(Op::kPool, out, "out")) return;
  const int64_t E = in.cols;
  const auto n_chunks = static_cast<int64_t>(ws_.chunks.size());
  const int64_t want = p == sdk::Pooling::kNone ? ws_.n_tokens : n_chunks;
  if (out.cols != E || out.rows != want || in.rows != ws_.n_tokens) {
    fail(Op::kPool, Status(StatusCode::kInvalidArgument, "shapes do not match the batch")
                        .with("out_rows", out.rows)
                        .with("expected_rows", want));
    return;
  }
  const size_t bytes = static_cast<size_t>(E) * sizeof(float);
  int64_t r = 0;
  for (int64_t s = 0; s < n_chunks; ++s) {
    const int64_t t0 = ws_.chunk_start[static_cast<size_t>(s)];
    const int64_t n = ws_.chunk_start[static_cast<size_t>(s) + 1] - t0;
    switch (p) {
      case sdk::Pooling::kNone:
        for (int64_t i = 0; i < n; ++i) std::memcpy(row(out, r++), row(in, t0 + i), bytes);
        break;
      case sdk::Pooling::kCls:
        std::memcpy(row(out, r++), row(in, t0), bytes);
        break;
      case sdk::Pooling::kLast:
        std::memcpy(row(out, r++), row(in, t0 + n - 1), bytes);
        break;
      case sdk::Pooling::kMean: {
        float* o = row(out, r++);
        for (int64_t e = 0; e < E; ++e) {
          double sum = 0.0;
          for (int64_t i = 0; i < n; ++i) sum += row(in, t0 + i)[e];
          o[e] = static_cast<float>(sum / static_cast<double>(n));
        }
        break;
      }
    }
  }
}

}  // namespace power
