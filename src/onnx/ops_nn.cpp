// Neural-network kernels: SGEMM, MatMul/Gemm, Conv (grouped, depthwise, dilated, 1-D and 2-D,
// im2col + SGEMM), ConvTranspose, BatchNormalization, pooling, LSTM, Resize; the op registry.
#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "base/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sgemm.h"
#include "onnx/ops_internal.h"

namespace power::onnx {

namespace {

Status op_matmul(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  const Tensor &a = *in[0], &b = *in[1];
  POWER_RETURN_IF_ERROR(need_f32(n, &a, "A"));
  POWER_RETURN_IF_ERROR(need_f32(n, &b, "B"));
  if (a.rank() == 0 || b.rank() == 0) return op_error(n, "scalar operand");
  Shape as = a.shape, bs = b.shape;
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), K2 = bs[bs.size() - 2], N = bs.back();
  if (K != K2)
    return op_error(
        n, fmt::format("inner dimensions differ: {} x {}", shape_str(a.shape), shape_str(b.shape)));
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  size_t r = std::max(ab.size(), bb.size());
  Shape batch(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i + ab.size() >= r ? ab[i + ab.size() - r] : 1;
    int64_t y = i + bb.size() >= r ? bb[i + bb.size() - r] : 1;
    if (x != y && x != 1 && y != 1) return op_error(n, "batch dimensions do not broadcast");
    batch[i] = std::max(x, y);
    if (x == 0 || y == 0) batch[i] = 0;
  }
  Shape os = batch;
  if (!a1) os.push_back(M);
  if (!b1) os.push_back(N);
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(DType::kF32, os));
  int64_t nb = shape_numel(batch);
  std::vector<int64_t> idx(r, 0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t oa = 0, ob = 0, sa = 1, sb = 1;
    for (int d = static_cast<int>(r) - 1; d >= 0; --d) {
      int64_t xa = d + ab.size() >= r ? ab[d + ab.size() - r] : 1;
      int64_t xb = d + bb.size() >= r ? bb[d + bb.size() - r] : 1;
      oa += (xa == 1 ? 0 : idx[d]) * sa;
      ob += (xb == 1 ? 0 : idx[d]) * sb;
      sa *= xa;
      sb *= xb;
    }
    sgemm(ctx.pool, M, N, K, a.data<float>() + oa * M * K, K, false, b.data<float>() + ob * K * N,
          N, false, out[0].mutable_data<float>() + bi * M * N, N, false);
    for (int d = static_cast<int>(r) - 1; d >= 0; --d) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return Status();
}

Status op_gemm(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  const Tensor &a = *in[0], &b = *in[1];
  POWER_RETURN_IF_ERROR(need_f32(n, &a, "A"));
  POWER_RETURN_IF_ERROR(need_f32(n, &b, "B"));
  if (a.rank() != 2 || b.rank() != 2) return op_error(n, "A and B must be 2-D");
  bool ta = n.attr_i("transA", 0) != 0, tb = n.attr_i("transB", 0) != 0;
  float alpha = n.attr_f("alpha", 1.0f), beta = n.attr_f("beta", 1.0f);
  int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  int64_t K2 = tb ? b.shape[1] : b.shape[0], N = tb ? b.shape[0] : b.shape[1];
  if (K != K2) return op_error(n, "inner dimensions differ");
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(DType::kF32, {M, N}));
  float* y = out[0].mutable_data<float>();
  sgemm(ctx.pool, M, N, K, a.data<float>(), a.shape[1], ta, b.data<float>(), b.shape[1], tb, y, N,
        false);
  if (alpha != 1.0f)
    for (int64_t i = 0; i < M * N; ++i) y[i] *= alpha;
  if (in.size() > 2 && in[2]) {
    const Tensor& c = *in[2];
    POWER_RETURN_IF_ERROR(need_f32(n, &c, "C"));
    Shape cs = c.shape;
    while (cs.size() < 2) cs.insert(cs.begin(), 1);
    if (cs.size() != 2 || (cs[0] != 1 && cs[0] != M) || (cs[1] != 1 && cs[1] != N))
      return op_error(n, "C does not broadcast");
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        y[i * N + j] += beta * c.data<float>()[(cs[0] == 1 ? 0 : i) * cs[1] + (cs[1] == 1 ? 0 : j)];
  }
  return Status();
}

// Spatial geometry shared by Conv and the pools (1-D is treated as 2-D with height 1).
struct Geo {
  int64_t N, C, H, W;  // input
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pl, pb, pr;  // pads top, left, bottom, right
  int64_t OH, OW;
  int spatial;  // 1 or 2
};

Status geometry(const Node& n, const Shape& xs, const std::vector<int64_t>& kernel, Geo& g,
                bool ceil_mode) {
  int sp = static_cast<int>(xs.size()) - 2;
  if (sp != 1 && sp != 2)
    return op_unsupported(n, fmt::format("{}-D spatial input (1-D and 2-D are supported)", sp));
  if (static_cast<int>(kernel.size()) != sp)
    return op_error(n, "kernel rank differs from the input's");
  g.spatial = sp;
  g.N = xs[0];
  g.C = xs[1];
  g.H = sp == 2 ? xs[2] : 1;
  g.W = xs[xs.size() - 1];
  auto strides = n.attr_ints("strides"), dil = n.attr_ints("dilations"), pads = n.attr_ints("pads");
  if (strides.empty()) strides.assign(sp, 1);
  if (dil.empty()) dil.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (static_cast<int>(strides.size()) != sp || static_cast<int>(dil.size()) != sp ||
      static_cast<int>(pads.size()) != 2 * sp) {
    return op_error(n, "strides/dilations/pads lengths differ from the spatial rank");
  }
  for (int64_t v : strides)
    if (v <= 0) return op_error(n, "stride must be positive");
  for (int64_t v : dil)
    if (v <= 0) return op_error(n, "dilation must be positive");
  for (int64_t v : kernel)
    if (v <= 0) return op_error(n, "kernel size must be positive");
  for (int64_t v : pads)
    if (v < 0) return op_error(n, "negative pads");
  g.kh = sp == 2 ? kernel[0] : 1;
  g.kw = kernel[sp - 1];
  g.sh = sp == 2 ? strides[0] : 1;
  g.sw = strides[sp - 1];
  g.dh = sp == 2 ? dil[0] : 1;
  g.dw = dil[sp - 1];
  std::string ap = n.attr_s("auto_pad", "NOTSET");
  int64_t in_sz[2] = {g.H, g.W}, k[2] = {g.kh, g.kw}, s[2] = {g.sh, g.sw}, d[2] = {g.dh, g.dw};
  int64_t pb_[2], pe_[2], o[2];
  for (int a = 0; a < 2; ++a) {
    int pi = sp == 2 ? a : 0;
    bool real = sp == 2 || a == 1;
    int64_t ek = (k[a] - 1) * d[a] + 1;
    if (!real) {
      pb_[a] = pe_[a] = 0;
      o[a] = 1;
      continue;
    }
    if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      o[a] = (in_sz[a] + s[a] - 1) / s[a];
      int64_t total = std::max<int64_t>(0, (o[a] - 1) * s[a] + ek - in_sz[a]);
      pb_[a] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe_[a] = total - pb_[a];
    } else {
      if (ap == "VALID") {
        pb_[a] = pe_[a] = 0;
      } else if (ap == "NOTSET") {
        pb_[a] = pads[pi];
        pe_[a] = pads[pi + sp];
      } else {
        return op_unsupported(n, fmt::format("auto_pad '{}'", ap));
      }
      int64_t span = in_sz[a] + pb_[a] + pe_[a] - ek;
      if (span < 0) return op_error(n, "kernel larger than the padded input");
      o[a] = (ceil_mode ? (span + s[a] - 1) / s[a] : span / s[a]) + 1;
      // ceil_mode: the last window must start inside the input or left padding.
      if (ceil_mode && (o[a] - 1) * s[a] >= in_sz[a] + pb_[a]) o[a]--;
    }
  }
  g.pt = pb_[0];
  g.pb = pe_[0];
  g.pl = pb_[1];
  g.pr = pe_[1];
  g.OH = o[0];
  g.OW = o[1];
  return Status();
}

Shape out_shape(const Geo& g, int64_t channels) {
  if (g.spatial == 1) return {g.N, channels, g.OW};
  return {g.N, channels, g.OH, g.OW};
}

Status check_conv(const Node& n) {
  if (n.has("kernel_shape") && n.attr_ints("kernel_shape").size() > 2) {
    return op_unsupported(n, "3-D convolution");
  }
  std::string ap = n.attr_s("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") {
    return op_unsupported(n, fmt::format("auto_pad '{}'", ap));
  }
  return Status();
}

// The output columns [lo, hi) whose input column ow * sw + off lies inside [0, W).
void valid_columns(const Geo& g, int64_t off, int64_t& lo, int64_t& hi) {
  conv_index_range(off, g.sw, g.W, g.OW, lo, hi);
}

// im2col rows [c0, c1) of input channels for output positions [p0, p1): row
// ((c * kh + i) * kw + j) of `col` (rows ld apart) holds at p - p0, for each position p, the
// input pixel tap (i, j) of channel c reads (0 in the padding). Each output row's share is zero
// edges around one contiguous copy (stride 1) or one strided gather, no bounds tests.
void im2col(const Geo& g, const float* xin, int64_t c0, int64_t c1, int64_t p0, int64_t p1,
            float* col, int64_t ld) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        float* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        const int64_t off = j * g.dw - g.pl;
        int64_t lo, hi;
        valid_columns(g, off, lo, hi);
        for (int64_t oh = p0 / g.OW; oh * g.OW < p1; ++oh) {
          // Output columns [a, b) of this row fall in the range; they go to row[at + ow].
          const int64_t a = std::max<int64_t>(0, p0 - oh * g.OW);
          const int64_t b = std::min(g.OW, p1 - oh * g.OW);
          float* __restrict r = row + (oh * g.OW + a - p0);  // column a
          const int64_t ih = oh * g.sh - g.pt + i * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(r, r + (b - a), 0.0f);
            continue;
          }
          const float* __restrict src = xin + (c * g.H + ih) * g.W + off;
          const int64_t l = std::clamp(lo, a, b), h = std::clamp(hi, l, b);
          std::fill(r, r + (l - a), 0.0f);
          if (g.sw == 1) {
            std::copy(src + l, src + h, r + (l - a));
          } else {
            for (int64_t ow = l; ow < h; ++ow) r[ow - a] = src[ow * g.sw];
          }
          std::fill(r + (h - a), r + (b - a), 0.0f);
        }
      }
}

// The columns of im2col's matrix for output positions [0, P) of one group (cg channels from
// xin), each as a contiguous vector of cg * kh * kw floats in im2col's row order (c, i, j):
// out + p * kk is position p's receptive field, zeros where it falls in the padding. The
// few-position path's dot products read them as they are (im2col rows would need a transpose).
void patch_columns(const Geo& g, const float* xin, int64_t cg, int64_t P, float* out) {
  const int64_t kk = cg * g.kh * g.kw;
  for (int64_t p = 0; p < P; ++p) {
    const int64_t oh = p / g.OW, ow = p % g.OW;
    const int64_t iw0 = ow * g.sw - g.pl;
    // Taps j with iw0 + j * dw inside [0, W).
    int64_t lo = 0, hi = g.kw;
    if (g.dw == 1) {
      lo = std::clamp<int64_t>(-iw0, 0, g.kw);
      hi = std::clamp<int64_t>(g.W - iw0, lo, g.kw);
    }
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t i = 0; i < g.kh; ++i) {
        float* d = out + p * kk + (c * g.kh + i) * g.kw;
        const int64_t ih = oh * g.sh - g.pt + i * g.dh;
        if (ih < 0 || ih >= g.H) {
          std::fill(d, d + g.kw, 0.0f);
          continue;
        }
        const float* src = xin + (c * g.H + ih) * g.W;
        if (g.dw == 1) {
          std::fill(d, d + lo, 0.0f);
          std::copy(src + iw0 + lo, src + iw0 + hi, d + lo);
          std::fill(d + hi, d + g.kw, 0.0f);
        } else {
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t iw = iw0 + j * g.dw;
            d[j] = iw >= 0 && iw < g.W ? src[iw] : 0.0f;
          }
        }
      }
  }
}

Status op_conv(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  const Tensor &x = *in[0], &w = *in[1];
  POWER_RETURN_IF_ERROR(need_f32(n, &x, "X"));
  POWER_RETURN_IF_ERROR(need_f32(n, &w, "W"));
  if (w.rank() != x.rank() || x.rank() < 3) return op_error(n, "W and X ranks differ");
  std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  Geo g;
  POWER_RETURN_IF_ERROR(geometry(n, x.shape, kernel, g, false));
  int64_t group = n.attr_i("group", 1);
  int64_t M = w.shape[0];
  if (group <= 0 || g.C % group != 0 || M % group != 0 || w.shape[1] != g.C / group) {
    return op_error(
        n, fmt::format("channels {} / group {} do not match W {}", g.C, group, shape_str(w.shape)));
  }
  const float* bias = nullptr;
  if (in.size() > 2 && in[2]) {
    POWER_RETURN_IF_ERROR(need_f32(n, in[2], "B"));
    if (in[2]->numel() != M) return op_error(n, "bias length differs from output channels");
    bias = in[2]->data<float>();
  }
  // Every output element is written: depthwise planes start from the bias, SGEMM overwrites.
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor_uninit(DType::kF32, out_shape(g, M)));
  int64_t cg = g.C / group, mg = M / group, kk = cg * g.kh * g.kw, P = g.OH * g.OW;
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  float* py = out[0].mutable_data<float>();
  bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0 &&
                   g.pb == 0 && g.pr == 0;
  bool depthwise = cg == 1 && mg == 1;
  // Non-depthwise products go by column chunks: im2col of the chunk's output positions (about
  // 512 KiB), its product, then the bias and the fused epilogue (in the SGEMM tiles where the
  // ISA has them, else while the chunk's output rows, about 256 KiB, are still in cache); the
  // pool takes chunks, each thread with its own im2col block. Deep layers (few output
  // positions, many channels) instead build the whole im2col matrix and let sgemm split the
  // rows. A chunk is a whole number of 32-column strips (the AVX-512 tile's width, two of the
  // AVX2 tile's), the nearest to 512 KiB of im2col: rounded down to 16 columns, det's 3x3
  // convolutions over 96 channels took 144, and every fifth strip was half empty.
  // Small convolutions (MNIST's, Silero VAD's) run on the calling thread: waking the pool costs
  // more than it saves.
  //
  // Stride-1 convolutions do not copy im2col rows: with the input planes zero-padded once (when
  // the convolution pads; Hp x Wp, Wp = W + pl + pr), row (c, i, j) of the product's B matrix is
  // channel c's padded plane shifted by i * dh rows and j * dw columns, read in place
  // (gemm_block's brows). The product then covers "wide" output rows of Wp columns, of which the
  // first OW are the output; a chunk is whole output rows, its product goes to a per-thread block
  // and its OW-column rows are copied out. Each output element is the same chain of fused
  // multiply-adds over the same values as with im2col rows (the padding's zeros included), so
  // the bits are the same; what goes is the copy of kh * kw shifted pieces per input row.
  const double work = static_cast<double>(g.N) * M * P * std::max<int64_t>(1, kk);
  ThreadPool* pool = ctx.pool && work >= kSgemmMinParallelWork ? ctx.pool : nullptr;
  const int threads = pool ? pool->size() : 1;
  const int64_t Hp = g.H + g.pt + g.pb, Wp = g.W + g.pl + g.pr;
  // (Padded planes of at most 2^31 floats each: huge pads with a huge dilation can leave a
  // small output over an enormous padded plane, which takes the im2col path.)
  const bool indirect = !pointwise && !depthwise && g.sh == 1 && g.sw == 1 &&
                        g.OH + (g.kh - 1) * g.dh == Hp && g.OW + (g.kw - 1) * g.dw == Wp &&
                        Wp > 0 && Hp <= (int64_t{1} << 31) / Wp;
  const bool padded = g.pt != 0 || g.pb != 0 || g.pl != 0 || g.pr != 0;
  int64_t chunk = std::clamp<int64_t>((65536 / std::max<int64_t>(1, mg)) / 64 * 64, 64, 4096);
  if (!pointwise && !indirect)
    chunk =
        std::min(chunk, std::max<int64_t>(64, (131072 / std::max<int64_t>(1, kk) + 16) / 32 * 32));
  // Output rows per indirect chunk; with a pool, few enough for two chunks per thread when the
  // output has the rows (det's 3x3 convolutions over 60x80 made one 32-row chunk and a half
  // one, which sent two threads to the im2col path, slower than one thread).
  int64_t chunk_rows = std::max<int64_t>(1, chunk / Wp);
  if (indirect && threads > 1)
    chunk_rows =
        std::min(chunk_rows, std::max<int64_t>(1, (g.OH + 2 * threads - 1) / (2 * threads)));
  const int64_t chunks = indirect ? (g.OH + chunk_rows - 1) / chunk_rows : (P + chunk - 1) / chunk;
  // sgemm also covers an empty K (no input channels: the output is the bias) and few output
  // positions (its dot-product path).
  const bool by_rows = (threads > 1 && chunks < 2 * threads) || kk == 0 || P < 16;
  // At most kSgemmDotColumns positions (Silero VAD's convolutions): each output is a dot product of
  // a weight row and the position's patch column (patch_columns), the bits of sgemm's
  // few-column path without its transpose of im2col rows. An image's outputs do not depend on
  // the other images of the batch.
  const bool few = !depthwise && kk > 0 && P <= kSgemmDotColumns;
  Tensor col;    // im2col rows or patch columns, wide output blocks or depthwise scratch, written
                 // before read
  Tensor plane;  // the indirect path's zero-padded input planes of one group
  std::vector<const float*> brows;  // per thread: the indirect path's kk row pointers
  if (few) {
    POWER_ASSIGN_OR_RETURN(col, make_tensor_uninit(DType::kF32, {P, kk}));
  } else if (!pointwise && !depthwise) {
    if (by_rows) {
      POWER_ASSIGN_OR_RETURN(col, make_tensor_uninit(DType::kF32, {kk, P}));
    } else if (indirect) {
      POWER_ASSIGN_OR_RETURN(col, make_tensor_uninit(DType::kF32, {threads, mg * chunk_rows * Wp}));
      if (padded) {
        POWER_ASSIGN_OR_RETURN(plane, make_tensor_uninit(DType::kF32, {cg, Hp * Wp}));
      }
      brows.resize(static_cast<size_t>(threads * kk));
    } else {
      POWER_ASSIGN_OR_RETURN(col, make_tensor_uninit(DType::kF32, {threads, kk * chunk}));
    }
  }
  // Channel-parallel work (depthwise planes, im2col rows, chunks) goes to the pool when it has
  // threads.
  auto channels = [&](int64_t count, const std::function<void(size_t, size_t, int)>& fn) {
    if (threads > 1 && count > 1) {
      pool->parallel_for(static_cast<size_t>(count), fn);
    } else {
      fn(0, static_cast<size_t>(count), 0);
    }
  };
  const std::vector<FusedStep>& epi = n.epilogue;
  const DepthwiseGeo dg{g.H, g.W, g.OH, g.OW, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl};
  // The plane kernels apply the steps (in registers on AVX2 and AVX-512).
  const std::vector<FusedStep>* dw_steps = epi.empty() ? nullptr : &epi;
  const int64_t dw_scratch = depthwise ? depthwise_scratch_floats(dg) : 0;
  if (dw_scratch > 0) {  // each thread's padded, phase-split copy of the plane it works on
    POWER_ASSIGN_OR_RETURN(col, make_tensor_uninit(DType::kF32, {threads, dw_scratch}));
  }
  for (int64_t b = 0; b < g.N; ++b) {
    if (depthwise) {
      channels(group, [&](size_t c0, size_t c1, int thread) {
        for (size_t c = c0; c < c1; ++c) {
          float* plane = py + (b * M + c) * P;
          const float* xplane = px + (b * g.C + c) * g.H * g.W;
          const float bc = bias ? bias[c] : 0.0f;
          float* scratch =
              dw_scratch > 0 ? col.mutable_data<float>() + thread * dw_scratch : nullptr;
          depthwise_plane(dg, xplane, pw + c * kk, bc, plane, scratch, dw_steps,
                          static_cast<int64_t>(c));
        }
      });
      continue;
    }
    for (int64_t gi = 0; gi < group; ++gi) {
      const float* xin = px + (b * g.C + gi * cg) * g.H * g.W;
      float* yout = py + (b * M + gi * mg) * P;
      const float* wg = pw + gi * mg * kk;
      const float* bg = bias ? bias + gi * mg : nullptr;
      // Bias and fused steps on columns [j0, j0 + len) of output rows [m0, m1) of this group.
      auto finish = [&](int64_t m0, int64_t m1, int64_t j0, int64_t len) {
        if (!bg && epi.empty()) return;
        for (int64_t m = m0; m < m1; ++m)
          apply_epilogue(epi, bg ? bg + m : nullptr, gi * mg + m, yout + m * P + j0, len);
      };
      if (few) {
        patch_columns(g, xin, cg, P, col.mutable_data<float>());
        const float* cols[kSgemmDotColumns];
        for (int64_t p = 0; p < P; ++p) cols[p] = col.data<float>() + p * kk;
        gemm_dot_columns(pool, mg, P, kk, wg, kk, cols, yout, P);
        if (bg || !epi.empty()) finish(0, mg, 0, P);
        continue;
      }
      if (by_rows) {
        const float* bmat = xin;
        if (!pointwise) {
          channels(cg, [&](size_t c0, size_t c1, int) {
            im2col(g, xin, static_cast<int64_t>(c0), static_cast<int64_t>(c1), 0, P,
                   col.mutable_data<float>(), P);
          });
          bmat = col.data<float>();
        }
        sgemm(pool, mg, P, kk, wg, kk, false, bmat, P, false, yout, P, false);
        if (bg || !epi.empty()) {
          channels(mg, [&](size_t m0, size_t m1, int) {
            finish(static_cast<int64_t>(m0), static_cast<int64_t>(m1), 0, P);
          });
        }
        continue;
      }
      // The bias and epilogue go on each register tile before it is stored (TileEpilogue), not
      // in a pass that reads the chunk's output back.
      const TileEpilogue tile_ep{&epi, bg, gi * mg};
      const bool in_tiles = bg || !epi.empty();
      const TileEpilogue* ep = in_tiles ? &tile_ep : nullptr;
      if (indirect) {
        const float* planes = xin;
        if (padded) {
          channels(cg, [&](size_t c0, size_t c1, int) {
            for (size_t c = c0; c < c1; ++c) {
              float* d = plane.mutable_data<float>() + static_cast<int64_t>(c) * Hp * Wp;
              const float* src = xin + static_cast<int64_t>(c) * g.H * g.W;
              std::fill(d, d + g.pt * Wp, 0.0f);
              for (int64_t r = 0; r < g.H; ++r) {
                float* dr = d + (g.pt + r) * Wp;
                std::fill(dr, dr + g.pl, 0.0f);
                std::copy(src + r * g.W, src + (r + 1) * g.W, dr + g.pl);
                std::fill(dr + g.pl + g.W, dr + Wp, 0.0f);
              }
              std::fill(d + (g.pt + g.H) * Wp, d + Hp * Wp, 0.0f);
            }
          });
          planes = plane.data<float>();
        }
        channels(chunks, [&](size_t c0, size_t c1, int thread) {
          float* wide = col.mutable_data<float>() + thread * col.shape[1];
          const float** rows = brows.data() + thread * kk;
          for (size_t c = c0; c < c1; ++c) {
            const int64_t oh0 = static_cast<int64_t>(c) * chunk_rows;
            const int64_t oh1 = std::min(g.OH, oh0 + chunk_rows);
            const int64_t len = (oh1 - 1 - oh0) * Wp + g.OW;  // wide columns [oh0 * Wp, +len)
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t i = 0; i < g.kh; ++i)
                for (int64_t j = 0; j < g.kw; ++j)
                  rows[(ci * g.kh + i) * g.kw + j] =
                      planes + ci * Hp * Wp + (oh0 + i * g.dh) * Wp + j * g.dw;
            gemm_block(0, mg, 0, len, kk, wg, kk, nullptr, 0, wide, len, true, ep, rows);
            for (int64_t m = 0; m < mg; ++m)
              for (int64_t r = 0; r < oh1 - oh0; ++r)
                std::copy(wide + m * len + r * Wp, wide + m * len + r * Wp + g.OW,
                          yout + m * P + (oh0 + r) * g.OW);
            if (!in_tiles) finish(0, mg, oh0 * g.OW, (oh1 - oh0) * g.OW);
          }
        });
        continue;
      }
      channels(chunks, [&](size_t c0, size_t c1, int thread) {
        float* cb = pointwise ? nullptr : col.mutable_data<float>() + thread * kk * chunk;
        for (size_t c = c0; c < c1; ++c) {
          const int64_t j0 = static_cast<int64_t>(c) * chunk, j1 = std::min(P, j0 + chunk);
          const int64_t len = j1 - j0;
          if (pointwise) {
            gemm_block(0, mg, 0, len, kk, wg, kk, xin + j0, P, yout + j0, P, true, ep);
          } else {
            im2col(g, xin, 0, cg, j0, j1, cb, len);
            gemm_block(0, mg, 0, len, kk, wg, kk, cb, len, yout + j0, P, true, ep);
          }
          if (!in_tiles) finish(0, mg, j0, len);
        }
      });
    }
  }
  return Status();
}

}  // namespace

void batch_norm_factors(const float* gamma, const float* beta, const float* mean, const float* var,
                        float eps, int64_t channels, float* scale, float* shift) {
  for (int64_t c = 0; c < channels; ++c) {
    const float s = gamma[c] / std::sqrt(var[c] + eps);
    scale[c] = s;
    if (shift) shift[c] = beta[c] - mean[c] * s;
  }
}

namespace {

Status check_conv_transpose(const Node& n) {
  POWER_RETURN_IF_ERROR(check_conv(n));
  if (n.has("output_shape")) return op_unsupported(n, "the output_shape attribute");
  if (n.attr_s("auto_pad", "NOTSET") != "NOTSET")
    return op_unsupported(n, "auto_pad on ConvTranspose");
  return Status();
}

Status op_conv_transpose(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  const Tensor &x = *in[0], &w = *in[1];
  POWER_RETURN_IF_ERROR(need_f32(n, &x, "X"));
  POWER_RETURN_IF_ERROR(need_f32(n, &w, "W"));
  int sp = x.rank() - 2;
  if (w.rank() != x.rank() || (sp != 1 && sp != 2))
    return op_unsupported(n, "only 1-D and 2-D inputs");
  int64_t group = n.attr_i("group", 1);
  int64_t N = x.shape[0], C = x.shape[1], H = sp == 2 ? x.shape[2] : 1, W = x.shape.back();
  if (group <= 0 || C % group != 0 || w.shape[0] != C)
    return op_error(n, "W's first dimension must equal input channels");
  int64_t mg = w.shape[1], M = mg * group, cg = C / group;
  int64_t kh = sp == 2 ? w.shape[2] : 1, kw = w.shape.back();
  auto strides = n.attr_ints("strides"), dil = n.attr_ints("dilations"), pads = n.attr_ints("pads"),
       opad = n.attr_ints("output_padding");
  if (strides.empty()) strides.assign(sp, 1);
  if (dil.empty()) dil.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (opad.empty()) opad.assign(sp, 0);
  if (static_cast<int>(strides.size()) != sp || static_cast<int>(dil.size()) != sp ||
      static_cast<int>(pads.size()) != 2 * sp || static_cast<int>(opad.size()) != sp)
    return op_error(n, "attribute lengths differ from the spatial rank");
  for (int64_t v : strides)
    if (v <= 0) return op_error(n, "stride must be positive");
  for (int64_t v : dil)
    if (v <= 0) return op_error(n, "dilation must be positive");
  int64_t sh = sp == 2 ? strides[0] : 1, sw = strides[sp - 1], dh = sp == 2 ? dil[0] : 1,
          dw = dil[sp - 1];
  int64_t pt = sp == 2 ? pads[0] : 0, pl = pads[sp - 1], pb = sp == 2 ? pads[2] : 0,
          pr = pads[2 * sp - 1];
  int64_t oph = sp == 2 ? opad[0] : 0, opw = opad[sp - 1];
  int64_t OH = sp == 2 ? sh * (H - 1) + oph + (kh - 1) * dh + 1 - pt - pb : 1;
  int64_t OW = sw * (W - 1) + opw + (kw - 1) * dw + 1 - pl - pr;
  if (OH <= 0 || OW <= 0) return op_error(n, "empty output");
  Shape os = sp == 2 ? Shape{N, M, OH, OW} : Shape{N, M, OW};
  // The bias and the fused steps go on each output plane after the scatter (the separate
  // nodes' bits).
  const float* bias = nullptr;
  if (in.size() > 2 && in[2]) {
    if (in[2]->numel() != M || in[2]->dtype != DType::kF32)
      return op_error(n, "bias length differs from output channels");
    bias = in[2]->data<float>();
  }
  // Taps that tile the output (kernel = stride, no dilation, pads or output padding: the OCR
  // detector's 2x2, stride-2 upsampling) each write a distinct output pixel, so every output is
  // 0 + one product, written in one pass per output row, its bias and steps applied while the
  // row is in cache; no zero-filled output is read back.
  const bool tiled = sh == kh && sw == kw && dh == 1 && dw == 1 && pt == 0 && pb == 0 && pl == 0 &&
                     pr == 0 && oph == 0 && opw == 0;
  POWER_ASSIGN_OR_RETURN(
      out[0], tiled ? make_tensor_uninit(DType::kF32, os) : make_tensor(DType::kF32, os));
  int64_t HW = H * W, kk = mg * kh * kw;
  std::vector<float> wt(static_cast<size_t>(kk * cg));
  // The product's rows (sgemm overwrites them: not zero-filled, from the model's buffer pool).
  POWER_ASSIGN_OR_RETURN(Tensor col_rows, make_tensor_uninit(DType::kF32, {kk, HW}));
  float* col = col_rows.mutable_data<float>();
  float* py = out[0].mutable_data<float>();
  for (int64_t gi = 0; gi < group; ++gi) {
    // W_g is [cg, mg*kh*kw]; we need its transpose [mg*kh*kw, cg].
    const float* wg = w.data<float>() + gi * cg * kk;
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t r = 0; r < kk; ++r) wt[r * cg + c] = wg[c * kk + r];
    for (int64_t b = 0; b < N; ++b) {
      const float* xin = x.data<float>() + (b * C + gi * cg) * HW;
      sgemm(ctx.pool, kk, HW, cg, wt.data(), cg, false, xin, HW, false, col, HW, false);
      float* yout = py + (b * M + gi * mg) * OH * OW;
      if (tiled) {  // output (ih * kh + i, iw * kw + j) = 0 + tap (i, j) at input (ih, iw)
        auto planes = [&](size_t m0, size_t m1, int) {
          for (auto m = static_cast<int64_t>(m0); m < static_cast<int64_t>(m1); ++m)
            for (int64_t oh = 0; oh < OH; ++oh) {
              const int64_t ih = oh / kh, i = oh % kh;
              float* __restrict yr = yout + (m * OH + oh) * OW;
              for (int64_t j = 0; j < kw; ++j) {
                const float* __restrict xr = col + ((m * kh + i) * kw + j) * HW + ih * W;
                for (int64_t iw = 0; iw < W; ++iw) yr[iw * kw + j] = 0.0f + xr[iw];
              }
              const int64_t c = gi * mg + m;
              if (bias || !n.epilogue.empty())
                apply_epilogue(n.epilogue, bias ? bias + c : nullptr, c, yr, OW);
            }
        };
        if (ctx.pool && mg > 1) {
          ctx.pool->parallel_for(static_cast<size_t>(mg), planes);
        } else {
          planes(0, static_cast<size_t>(mg), 0);
        }
        continue;
      }
      // Tap (i, j) adds input pixel (ih, iw) to output (ih * sh - pt + i * dh, iw * sw - pl +
      // j * dw); the input columns whose output column is inside [0, OW) are [lo, hi), found
      // once per tap column, so the scatter has no bounds test (same order, same bits).
      for (int64_t m = 0; m < mg; ++m)
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            const float* row = col + ((m * kh + i) * kw + j) * HW;
            const int64_t off = j * dw - pl;  // output column = iw * sw + off
            int64_t lo, hi;
            conv_index_range(off, sw, OW, W, lo, hi);
            for (int64_t ih = 0; ih < H; ++ih) {
              int64_t oh = ih * sh - pt + i * dh;
              if (oh < 0 || oh >= OH) continue;
              float* __restrict yr = yout + (m * OH + oh) * OW + off;
              const float* __restrict xr = row + ih * W;
              for (int64_t iw = lo; iw < hi; ++iw) yr[iw * sw] += xr[iw];
            }
          }
    }
  }
  if (!tiled && (bias || !n.epilogue.empty())) {
    for (int64_t b = 0; b < N; ++b)
      for (int64_t m = 0; m < M; ++m)
        apply_epilogue(n.epilogue, bias ? bias + m : nullptr, m, py + (b * M + m) * OH * OW,
                       OH * OW);
  }
  return Status();
}

Status check_bn(const Node& n) {
  if (n.attr_i("training_mode", 0) != 0) return op_unsupported(n, "training_mode=1");
  if (n.outputs.size() > 1) return op_unsupported(n, "training outputs (running mean/var)");
  return Status();
}

Status op_batch_norm(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 5));
  const Tensor& x = *in[0];
  POWER_RETURN_IF_ERROR(need_f32(n, &x, "X"));
  if (x.rank() < 2) return op_error(n, "X must have a channel axis");
  int64_t C = x.shape[1];
  for (int i = 1; i < 5; ++i) {
    POWER_RETURN_IF_ERROR(need_f32(n, in[i], "parameter"));
    if (in[i]->numel() != C) return op_error(n, "parameter length differs from channels");
  }
  float eps = n.attr_f("epsilon", 1e-5f);
  std::vector<float> scale(C), shift(C);
  batch_norm_factors(in[1]->data<float>(), in[2]->data<float>(), in[3]->data<float>(),
                     in[4]->data<float>(), eps, C, scale.data(), shift.data());
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(DType::kF32, x.shape));
  int64_t inner = 1;
  for (int d = 2; d < x.rank(); ++d) inner *= x.shape[d];
  for (int64_t b = 0; b < x.shape[0]; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const float* s = x.data<float>() + (b * C + c) * inner;
      float* y = out[0].mutable_data<float>() + (b * C + c) * inner;
      for (int64_t i = 0; i < inner; ++i) y[i] = s[i] * scale[c] + shift[c];
    }
  return Status();
}

Status check_pool(const Node& n) {
  if (n.outputs.size() > 1 && n.outputs[1] >= 0) return op_unsupported(n, "the Indices output");
  if (n.attr_ints("kernel_shape").empty()) return op_error(n, "kernel_shape is required");
  if (n.attr_ints("kernel_shape").size() > 2) return op_unsupported(n, "3-D pooling");
  if (n.attr_i("storage_order", 0) != 0) return op_unsupported(n, "storage_order=1");
  std::string ap = n.attr_s("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") {
    return op_unsupported(n, fmt::format("auto_pad '{}'", ap));
  }
  return Status();
}

// One output row of a max pool whose windows tile the input row (kernel width = stride): output
// ow = the fold std::max(m, x) over taps (i, j) in order, from -inf, of the window at column
// ow * kw of the kh rows from `top`. Widths 2 and 3 (MNIST's pools) have the taps unrolled.
template <int KW>
void max_window_row_k(const Geo& g, const float* top, float* __restrict yr) {
  const int64_t kw = KW > 0 ? KW : g.kw;
  for (int64_t ow = 0; ow < g.OW; ++ow) {
    const float* w = top + ow * kw;
    float m = -INFINITY;
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < kw; ++j) m = std::max(m, w[i * g.W + j]);
    yr[ow] = m;
  }
}
void max_window_row(const Geo& g, const float* top, float* yr) {
  if (g.kw == 2) return max_window_row_k<2>(g, top, yr);
  if (g.kw == 3) return max_window_row_k<3>(g, top, yr);
  max_window_row_k<0>(g, top, yr);
}

// Max and average pooling by output rows: for each kernel tap (i, j), the output columns whose
// input column lies inside the image ([lo, hi), valid_columns) take the tap's input row in one
// pass with no bounds test. Every window still sees its taps in (i, j) order, so max keeps its
// ties and NaN handling (std::max(m, v) in that order, NaN inputs skipped) and the average its
// double sum; the divisor is (taps inside) or, with count_include_pad, (taps inside the padded
// area), each a product of a row count and a column count. Planes go to the pool.
Status pool(const Node& n, const Ins& in, Outs& out, bool is_max, ThreadPool* threads) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  POWER_RETURN_IF_ERROR(need_f32(n, &x, "X"));
  Geo g;
  POWER_RETURN_IF_ERROR(
      geometry(n, x.shape, n.attr_ints("kernel_shape"), g, n.attr_i("ceil_mode", 0) != 0));
  const bool include_pad = n.attr_i("count_include_pad", 0) != 0;
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor_uninit(DType::kF32, out_shape(g, g.C)));
  float* py = out[0].mutable_data<float>();
  const float* px = x.data<float>();
  // Per output column and row: taps inside the image, and taps inside the padded area.
  std::vector<int64_t> col_in(g.OW, 0), col_area(g.OW, 0), row_in(g.OH, 0), row_area(g.OH, 0);
  for (int64_t ow = 0; ow < g.OW; ++ow)
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t iw = ow * g.sw - g.pl + j * g.dw;
      col_in[ow] += iw >= 0 && iw < g.W;
      col_area[ow] += iw >= -g.pl && iw < g.W + g.pr;
    }
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih = oh * g.sh - g.pt + i * g.dh;
      row_in[oh] += ih >= 0 && ih < g.H;
      row_area[oh] += ih >= -g.pt && ih < g.H + g.pb;
    }
  // Per kernel column j: the output columns [lo, hi) whose input column is inside the image.
  std::vector<int64_t> tap_lo(g.kw), tap_hi(g.kw);
  for (int64_t j = 0; j < g.kw; ++j) valid_columns(g, j * g.dw - g.pl, tap_lo[j], tap_hi[j]);
  // Other strided max pooling (strides 2-4: overlapping windows, pads, dilations) folds the
  // taps at every input column p of the output row's span, not only at p = ow * sw, so the
  // loads are contiguous and the loop vectorizes; yr[ow] is then span[ow * sw]. Each column sees
  // the same taps in the same order.
  // Windows that tile the rows (kernel width = stride, no padding or dilation, every tap inside
  // the image: MNIST's 2x2/2 and 3x3/3) are folded window by window instead, the taps of each
  // output in the same (i, j) order, with nothing computed that is not kept.
  const bool tiles = is_max && g.kw == g.sw && g.dh == 1 && g.dw == 1 && g.pt == 0 && g.pl == 0 &&
                     (g.OH - 1) * g.sh + g.kh <= g.H && g.OW * g.sw <= g.W;
  const bool spans = !tiles && is_max && g.sw > 1 && g.sw <= 4;
  const int64_t span = (g.OW - 1) * g.sw + 1;
  for_ranges(threads, g.N * g.C, g.OH * g.OW * g.kh * g.kw, [&](int64_t p0, int64_t p1) {
    std::vector<double> acc(is_max ? 0 : static_cast<size_t>(g.OW));
    std::vector<float> folded(spans ? static_cast<size_t>(span) : 0);
    for (int64_t bc = p0; bc < p1; ++bc) {
      const float* xin = px + bc * g.H * g.W;
      if (tiles) {
        for (int64_t oh = 0; oh < g.OH; ++oh)
          max_window_row(g, xin + oh * g.sh * g.W, py + (bc * g.OH + oh) * g.OW);
        continue;
      }
      if (spans) {
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          float* __restrict v = folded.data();
          std::fill(v, v + span, -INFINITY);
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t ih = oh * g.sh - g.pt + i * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            const float* __restrict xr = xin + ih * g.W;
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t off = j * g.dw - g.pl;  // input column = p + off
              const int64_t lo = std::max<int64_t>(0, -off), hi = std::min(span, g.W - off);
              for (int64_t p = lo; p < hi; ++p) v[p] = std::max(v[p], xr[p + off]);
            }
          }
          float* yr = py + (bc * g.OH + oh) * g.OW;
          for (int64_t ow = 0; ow < g.OW; ++ow) yr[ow] = v[ow * g.sw];
        }
        continue;
      }
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        float* __restrict yr = py + (bc * g.OH + oh) * g.OW;
        if (is_max) {
          std::fill(yr, yr + g.OW, -INFINITY);
        } else {
          std::fill(acc.begin(), acc.end(), 0.0);
        }
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t ih = oh * g.sh - g.pt + i * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          const float* __restrict xr = xin + ih * g.W;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t off = j * g.dw - g.pl;  // input column = ow * sw + off
            const int64_t lo = tap_lo[j], hi = tap_hi[j];
            if (is_max) {
              for (int64_t ow = lo; ow < hi; ++ow) yr[ow] = std::max(yr[ow], xr[ow * g.sw + off]);
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) acc[ow] += xr[ow * g.sw + off];
            }
          }
        }
        if (!is_max) {
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t div = include_pad ? row_area[oh] * col_area[ow] : row_in[oh] * col_in[ow];
            yr[ow] = div ? static_cast<float>(acc[ow] / static_cast<double>(div)) : 0.0f;
          }
        }
      }
    }
  });
  return Status();
}
Status op_max_pool(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return pool(n, in, out, true, ctx.pool);
}
Status op_avg_pool(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return pool(n, in, out, false, ctx.pool);
}

Status global_pool(const Node& n, const Ins& in, Outs& out, bool is_max, ThreadPool* pool) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  POWER_RETURN_IF_ERROR(need_f32(n, &x, "X"));
  if (x.rank() < 3) return op_error(n, "X must be N x C x spatial");
  Shape s = x.shape;
  int64_t inner = 1;
  for (int d = 2; d < x.rank(); ++d) {
    inner *= s[d];
    s[d] = 1;
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(DType::kF32, s));
  // Eight partial results per plane (element i goes to partial i % 8), combined in order: the
  // double sum of a plane is not one chain of `inner` dependent additions (a 120x160 plane of
  // the OCR detector took about 20k cycles of add latency), and max ignores the order.
  // Planes are independent: the pool takes ranges of them.
  constexpr int kLanes = 8;
  for_ranges(pool, x.shape[0] * x.shape[1], inner, [&](int64_t bc0, int64_t bc1) {
    for (int64_t bc = bc0; bc < bc1; ++bc) {
      const float* p = x.data<float>() + bc * inner;
      double acc[kLanes];
      std::fill(acc, acc + kLanes, is_max ? -INFINITY : 0.0);
      int64_t i = 0;
      if (is_max) {
        for (; i + kLanes <= inner; i += kLanes)
          for (int l = 0; l < kLanes; ++l) acc[l] = std::max<double>(acc[l], p[i + l]);
        for (; i < inner; ++i) acc[0] = std::max<double>(acc[0], p[i]);
      } else {
        for (; i + kLanes <= inner; i += kLanes)
          for (int l = 0; l < kLanes; ++l) acc[l] += p[i + l];
        for (; i < inner; ++i) acc[i % kLanes] += p[i];
      }
      double r = acc[0];
      for (int l = 1; l < kLanes; ++l) r = is_max ? std::max(r, acc[l]) : r + acc[l];
      out[0].mutable_data<float>()[bc] =
          static_cast<float>(is_max ? r : r / static_cast<double>(inner));
    }
  });
  return Status();
}
Status op_global_avg_pool(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return global_pool(n, in, out, false, ctx.pool);
}
Status op_global_max_pool(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return global_pool(n, in, out, true, ctx.pool);
}

// ---- LSTM (forward, default activations sigmoid/tanh/tanh, gate order i o f c) ----

Status check_lstm(const Node& n) {
  std::string dir = n.attr_s("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    return op_error(n, "invalid direction");
  if (n.has("activations")) {
    auto& a = n.attrs.at("activations").strings;
    for (size_t i = 0; i < a.size(); ++i) {
      const char* want = (i % 3 == 0) ? "Sigmoid" : "Tanh";
      if (a[i] != want) return op_unsupported(n, fmt::format("activation '{}'", a[i]));
    }
  }
  if (n.has("clip")) return op_unsupported(n, "cell clip");
  if (n.attr_i("input_forget", 0) != 0) return op_unsupported(n, "input_forget=1");
  if (n.attr_i("layout", 0) != 0) return op_unsupported(n, "layout=1");
  if (!n.has("hidden_size")) return op_error(n, "hidden_size is required");
  return Status();
}

Status op_lstm(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 3));
  const Tensor &x = *in[0], &w = *in[1], &r = *in[2];
  for (auto* t : {&x, &w, &r}) POWER_RETURN_IF_ERROR(need_f32(n, t, "input"));
  int64_t H = n.attr_i("hidden_size", 0);
  std::string dir = n.attr_s("direction", "forward");
  int64_t D = dir == "bidirectional" ? 2 : 1;
  if (x.rank() != 3 || w.rank() != 3 || r.rank() != 3) return op_error(n, "X, W, R must be 3-D");
  int64_t T = x.shape[0], B = x.shape[1], I = x.shape[2];
  if (H <= 0 || w.shape != Shape{D, 4 * H, I} || r.shape != Shape{D, 4 * H, H}) {
    return op_error(n, fmt::format("W {} / R {} do not match hidden_size {} and input {}",
                                   shape_str(w.shape), shape_str(r.shape), H, I));
  }
  auto opt = [&](size_t i) -> const Tensor* { return in.size() > i ? in[i] : nullptr; };
  const Tensor *bias = opt(3), *lens = opt(4), *h0 = opt(5), *c0 = opt(6), *peep = opt(7);
  if (bias && (bias->dtype != DType::kF32 || bias->shape != Shape{D, 8 * H}))
    return op_error(n, "B must be [dirs, 8H]");
  if (h0 && (h0->dtype != DType::kF32 || h0->shape != Shape{D, B, H}))
    return op_error(n, "initial_h must be [dirs, batch, H]");
  if (c0 && (c0->dtype != DType::kF32 || c0->shape != Shape{D, B, H}))
    return op_error(n, "initial_c must be [dirs, batch, H]");
  if (peep && (peep->dtype != DType::kF32 || peep->shape != Shape{D, 3 * H}))
    return op_error(n, "P must be [dirs, 3H]");
  std::vector<int64_t> seq(B, T);
  if (lens) {
    POWER_ASSIGN_OR_RETURN(seq, to_i64_vector(*lens));
    if (static_cast<int64_t>(seq.size()) != B)
      return op_error(n, "sequence_lens length differs from batch");
    for (int64_t v : seq)
      if (v < 0 || v > T) return op_error(n, "sequence length out of range");
  }
  Tensor y, yh, yc;
  POWER_ASSIGN_OR_RETURN(y, make_tensor(DType::kF32, {T, D, B, H}));
  POWER_ASSIGN_OR_RETURN(yh, make_tensor(DType::kF32, {D, B, H}));
  POWER_ASSIGN_OR_RETURN(yc, make_tensor(DType::kF32, {D, B, H}));
  std::vector<float> gates(static_cast<size_t>(B * 4 * H)), xw(static_cast<size_t>(T * B * 4 * H));
  for (int64_t d = 0; d < D; ++d) {
    bool reverse = dir == "reverse" || d == 1;
    const float* wd = w.data<float>() + d * 4 * H * I;
    const float* rd = r.data<float>() + d * 4 * H * H;
    // X * W^T for all steps at once: [T*B, 4H]. A sequence's rows take the same path whatever
    // the batch (stacked requests get the bits they get alone): dot products for up to 4
    // steps, else sgemm, which for more than 4 rows never takes its dot-product path.
    if (T <= 4) {
      gemm_nt_rows(T * B, 4 * H, I, x.data<float>(), I, wd, I, xw.data(), 4 * H, false);
    } else {
      sgemm(ctx.pool, T * B, 4 * H, I, x.data<float>(), I, false, wd, I, true, xw.data(), 4 * H,
            false);
    }
    std::vector<float> h(static_cast<size_t>(B * H), 0.0f), c(static_cast<size_t>(B * H), 0.0f);
    if (h0) std::memcpy(h.data(), h0->data<float>() + d * B * H, B * H * 4);
    if (c0) std::memcpy(c.data(), c0->data<float>() + d * B * H, B * H * 4);
    const float* bw = bias ? bias->data<float>() + d * 8 * H : nullptr;
    const float* pp = peep ? peep->data<float>() + d * 3 * H : nullptr;
    for (int64_t step = 0; step < T; ++step) {
      // h * R^T by dot products for any batch: one sequence's row gets the same bits alone
      // or stacked with others (and R is not transposed at every step).
      gemm_nt_rows(B, 4 * H, H, h.data(), H, rd, H, gates.data(), 4 * H, false);
      for (int64_t b = 0; b < B; ++b) {
        int64_t len = seq[b];
        if (step >= len) {  // past this sequence's end: outputs zero, state kept
          std::fill(y.mutable_data<float>() + ((step * D + d) * B + b) * H,
                    y.mutable_data<float>() + ((step * D + d) * B + b + 1) * H, 0.0f);
          continue;
        }
        int64_t t = reverse ? len - 1 - step : step;
        float* g = gates.data() + b * 4 * H;
        const float* xg = xw.data() + (t * B + b) * 4 * H;
        for (int64_t k = 0; k < 4 * H; ++k) {
          g[k] += xg[k];
          if (bw) g[k] += bw[k] + bw[4 * H + k];
        }
        float* hb = h.data() + b * H;
        float* cb = c.data() + b * H;
        for (int64_t j = 0; j < H; ++j) {
          auto sig = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
          float ig = g[j], og = g[H + j], fg = g[2 * H + j], cg = g[3 * H + j];
          if (pp) {
            ig += pp[j] * cb[j];
            fg += pp[2 * H + j] * cb[j];
          }
          float i_ = sig(ig), f_ = sig(fg), c_ = std::tanh(cg);
          float cn = f_ * cb[j] + i_ * c_;
          if (pp) og += pp[H + j] * cn;
          float o_ = sig(og);
          cb[j] = cn;
          hb[j] = o_ * std::tanh(cn);
        }
        std::memcpy(y.mutable_data<float>() + ((t * D + d) * B + b) * H, hb, H * 4);
      }
    }
    std::memcpy(yh.mutable_data<float>() + d * B * H, h.data(), B * H * 4);
    std::memcpy(yc.mutable_data<float>() + d * B * H, c.data(), B * H * 4);
  }
  out[0] = std::move(y);
  if (out.size() > 1) out[1] = std::move(yh);
  if (out.size() > 2) out[2] = std::move(yc);
  return Status();
}

// ---- Resize (nearest / linear, all coordinate transformation modes but tf_crop_and_resize) ----

Status check_resize(const Node& n) {
  std::string mode = n.attr_s("mode", "nearest");
  if (mode != "nearest" && mode != "linear")
    return op_unsupported(n, fmt::format("mode '{}'", mode));
  std::string ct = n.attr_s("coordinate_transformation_mode", "half_pixel");
  if (ct != "half_pixel" && ct != "asymmetric" && ct != "align_corners" &&
      ct != "pytorch_half_pixel" && ct != "tf_half_pixel_for_nn" && ct != "half_pixel_symmetric") {
    return op_unsupported(n, fmt::format("coordinate_transformation_mode '{}'", ct));
  }
  std::string nm = n.attr_s("nearest_mode", "round_prefer_floor");
  if (nm != "round_prefer_floor" && nm != "round_prefer_ceil" && nm != "floor" && nm != "ceil") {
    return op_unsupported(n, fmt::format("nearest_mode '{}'", nm));
  }
  if (n.attr_i("antialias", 0) != 0) return op_unsupported(n, "antialias");
  if (n.has("axes")) return op_unsupported(n, "the axes attribute");
  if (n.attr_s("keep_aspect_ratio_policy", "stretch") != "stretch")
    return op_unsupported(n, "keep_aspect_ratio_policy");
  if (n.opset < 10) return op_unsupported(n, "opset < 10");
  return Status();
}

Status op_resize(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  POWER_RETURN_IF_ERROR(need_f32(n, &x, "X"));
  int64_t r = x.rank();
  const Tensor* scales_t = nullptr;
  const Tensor* sizes_t = nullptr;
  if (n.opset < 11) {
    scales_t = in.size() > 1 ? in[1] : nullptr;
  } else {
    scales_t = in.size() > 2 ? in[2] : nullptr;
    sizes_t = in.size() > 3 ? in[3] : nullptr;
  }
  if (scales_t && scales_t->numel() == 0) scales_t = nullptr;
  if (sizes_t && sizes_t->numel() == 0) sizes_t = nullptr;
  if (!scales_t == !sizes_t) return op_error(n, "exactly one of scales and sizes must be given");
  std::vector<double> scale(r);
  Shape os(r);
  if (scales_t) {
    POWER_ASSIGN_OR_RETURN(scale, to_f64_vector(*scales_t));
    if (static_cast<int64_t>(scale.size()) != r)
      return op_error(n, "scales length differs from rank");
    for (int64_t d = 0; d < r; ++d) {
      if (!(scale[d] > 0)) return op_error(n, "scales must be positive");
      os[d] = static_cast<int64_t>(
          std::floor(static_cast<double>(x.shape[d]) * static_cast<float>(scale[d])));
    }
  } else {
    POWER_ASSIGN_OR_RETURN(auto sz, to_i64_vector(*sizes_t));
    if (static_cast<int64_t>(sz.size()) != r) return op_error(n, "sizes length differs from rank");
    for (int64_t d = 0; d < r; ++d) {
      if (sz[d] < 0) return op_error(n, "negative size");
      os[d] = sz[d];
      scale[d] = x.shape[d] ? static_cast<double>(sz[d]) / static_cast<double>(x.shape[d]) : 1.0;
    }
  }
  // An empty axis has no pixel to read for a non-empty output.
  if (shape_numel(os) > 0)
    for (int64_t d = 0; d < r; ++d)
      if (x.shape[d] == 0)
        return op_error(n, fmt::format("cannot resize the empty input {} to {}", shape_str(x.shape),
                                       shape_str(os)));
  std::string mode = n.attr_s("mode", "nearest");
  std::string ct = n.attr_s("coordinate_transformation_mode", "half_pixel");
  std::string nm = n.attr_s("nearest_mode", "round_prefer_floor");
  // Every output element is written below.
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor_uninit(DType::kF32, os));
  // Per axis and output index: source coordinate.
  std::vector<std::vector<int64_t>> lo(r), hi(r);
  std::vector<std::vector<float>> wt(r);
  for (int64_t d = 0; d < r; ++d) {
    int64_t in_sz = x.shape[d], out_sz = os[d];
    lo[d].resize(out_sz);
    hi[d].resize(out_sz);
    wt[d].resize(out_sz);
    for (int64_t i = 0; i < out_sz; ++i) {
      double s = scale[d], xo;
      if (ct == "half_pixel")
        xo = (i + 0.5) / s - 0.5;
      else if (ct == "half_pixel_symmetric") {
        double adj = out_sz / (s * in_sz);
        double center = in_sz / 2.0;
        double off = center * (1 - adj);
        xo = off + (i + 0.5) / s - 0.5;
      } else if (ct == "pytorch_half_pixel")
        xo = out_sz > 1 ? (i + 0.5) / s - 0.5 : 0.0;
      else if (ct == "align_corners") {
        // The resized length is in * scale (not floored) when scales are given.
        double len = scales_t ? static_cast<double>(in_sz) * static_cast<float>(s)
                              : static_cast<double>(out_sz);
        xo = len > 1 ? i * static_cast<double>(in_sz - 1) / (len - 1) : 0.0;
      } else if (ct == "tf_half_pixel_for_nn")
        xo = (i + 0.5) / s;
      else
        xo = i / s;  // asymmetric
      if (mode == "nearest") {
        double f = std::floor(xo);
        int64_t v;
        if (nm == "floor")
          v = static_cast<int64_t>(f);
        else if (nm == "ceil")
          v = static_cast<int64_t>(std::ceil(xo));
        else if (nm == "round_prefer_ceil")
          v = static_cast<int64_t>(std::floor(xo + 0.5));
        else
          v = (xo - f == 0.5) ? static_cast<int64_t>(f) : static_cast<int64_t>(std::round(xo));
        v = std::clamp<int64_t>(v, 0, in_sz - 1);
        lo[d][i] = hi[d][i] = v;
        wt[d][i] = 0;
      } else {
        xo = std::clamp(xo, 0.0, static_cast<double>(in_sz - 1));
        int64_t a = static_cast<int64_t>(std::floor(xo));
        int64_t b = std::min(a + 1, in_sz - 1);
        lo[d][i] = a;
        hi[d][i] = b;
        wt[d][i] = static_cast<float>(xo - static_cast<double>(a));
      }
    }
  }
  std::vector<int64_t> xst(r, 1);
  for (int64_t d = r - 2; d >= 0; --d) xst[d] = xst[d + 1] * x.shape[d + 1];
  if (mode == "nearest" && r == 4) {
    // NCHW images (the detector's upsampling): plane by plane, each output row a gather of
    // its source row by the precomputed column indices, or a copy of the previous output row
    // when both read the same source row. The pool takes planes.
    const int64_t OH = os[2], OW = os[3], planes = os[0] * os[1];
    const float* px = x.data<float>();
    float* py = out[0].mutable_data<float>();
    for_ranges(ctx.pool, planes, OH * OW, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p / os[1], c = p % os[1];
        const float* src = px + lo[0][b] * xst[0] + lo[1][c] * xst[1];
        float* dst = py + p * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          float* __restrict dr = dst + oh * OW;
          if (oh > 0 && lo[2][oh] == lo[2][oh - 1]) {
            std::memcpy(dr, dr - OW, static_cast<size_t>(OW) * 4);
            continue;
          }
          const float* __restrict sr = src + lo[2][oh] * xst[2];
          const int64_t* __restrict cols = lo[3].data();
          for (int64_t ow = 0; ow < OW; ++ow) dr[ow] = sr[cols[ow]];
        }
      }
    });
    return Status();
  }
  int64_t total = out[0].numel();
  std::vector<int64_t> idx(r, 0);
  const float* px = x.data<float>();
  float* py = out[0].mutable_data<float>();
  std::vector<int> lin_axes;
  for (int64_t d = 0; d < r; ++d)
    if (mode == "linear" &&
        !(x.shape[d] == os[d] && (ct == "half_pixel" || ct == "asymmetric" ||
                                  ct == "align_corners" || ct == "pytorch_half_pixel")))
      lin_axes.push_back(static_cast<int>(d));
  for (int64_t o = 0; o < total; ++o) {
    if (mode == "nearest") {
      int64_t off = 0;
      for (int64_t d = 0; d < r; ++d) off += lo[d][idx[d]] * xst[d];
      py[o] = px[off];
    } else {
      int64_t base = 0;
      for (int64_t d = 0; d < r; ++d) base += lo[d][idx[d]] * xst[d];
      double acc = 0;
      int corners = 1 << lin_axes.size();
      for (int cmask = 0; cmask < corners; ++cmask) {
        int64_t off = base;
        double w = 1;
        for (size_t k = 0; k < lin_axes.size(); ++k) {
          int d = lin_axes[k];
          float f = wt[d][idx[d]];
          if (cmask & (1 << k)) {
            off += (hi[d][idx[d]] - lo[d][idx[d]]) * xst[d];
            w *= f;
          } else {
            w *= 1 - f;
          }
        }
        if (w != 0) acc += w * px[off];
      }
      py[o] = static_cast<float>(acc);
    }
    for (int64_t d = r - 1; d >= 0; --d) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
  return Status();
}

}  // namespace

void register_nn_ops(std::vector<OpDef>& ops) {
  ops.insert(ops.end(), {
                            {"MatMul", op_matmul, nullptr, false},
                            {"Gemm", op_gemm, nullptr, false},
                            {"Conv", op_conv, check_conv, false},
                            {"ConvTranspose", op_conv_transpose, check_conv_transpose, false},
                            {"BatchNormalization", op_batch_norm, check_bn, false},
                            {"MaxPool", op_max_pool, check_pool, false},
                            {"AveragePool", op_avg_pool, check_pool, false},
                            {"GlobalAveragePool", op_global_avg_pool, nullptr, false},
                            {"GlobalMaxPool", op_global_max_pool, nullptr, false},
                            {"LSTM", op_lstm, check_lstm, false},
                            {"Resize", op_resize, check_resize, false},
                        });
}

const std::vector<OpDef>& all_ops() {
  static const std::vector<OpDef> ops = [] {
    std::vector<OpDef> v;
    register_elementwise_ops(v);
    register_tensor_ops(v);
    register_nn_ops(v);
    return v;
  }();
  return ops;
}

const OpDef* find_op(const std::string& op) {
  static const std::unordered_map<std::string, const OpDef*> index = [] {
    std::unordered_map<std::string, const OpDef*> m;
    for (const auto& d : all_ops()) m[d.name] = &d;
    return m;
  }();
  auto it = index.find(op);
  return it == index.end() ? nullptr : it->second;
}

}  // namespace power::onnx
