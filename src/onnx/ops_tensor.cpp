// Shape and data-movement kernels (any element type), constants, reductions, Softmax.
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/ops.h"
#include "onnx/ops_internal.h"

namespace power::onnx {
namespace {

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

Status op_identity(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  out[0] = *in[0];
  return Status();
}

Status op_reshape(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, n.opset >= 5 ? 2 : 1));
  std::vector<int64_t> spec;
  if (n.opset >= 5) {
    POWER_ASSIGN_OR_RETURN(spec, to_i64_vector(*in[1]));
  } else {
    spec = n.attr_ints("shape");
  }
  const Shape& xs = in[0]->shape;
  bool allowzero = n.attr_i("allowzero", 0) != 0;
  Shape s(spec.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allowzero) {
      if (i >= xs.size()) return op_error(n, "0 in shape beyond the input's rank");
      d = xs[i];
    }
    if (d == -1) {
      if (infer >= 0) return op_error(n, "more than one -1 in shape");
      infer = static_cast<int>(i);
      s[i] = 1;
      continue;
    }
    if (d < 0) return op_error(n, fmt::format("invalid dimension {}", d));
    s[i] = d;
    known *= d;
  }
  int64_t total = in[0]->numel();
  if (infer >= 0) {
    if (known == 0 || total % known != 0) return op_error(n, "cannot infer the -1 dimension");
    s[infer] = total / known;
  }
  if (shape_numel(s) != total) {
    return op_error(n, fmt::format("cannot reshape {} into {}", shape_str(xs), shape_str(s)));
  }
  out[0] = in[0]->reshaped(std::move(s));
  return Status();
}

Status op_flatten(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Shape& xs = in[0]->shape;
  int64_t axis = n.attr_i("axis", 1);
  if (axis < 0) axis += static_cast<int64_t>(xs.size());
  if (axis < 0 || axis > static_cast<int64_t>(xs.size())) return op_error(n, "axis out of range");
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(xs.size()); ++i) (i < axis ? a : b) *= xs[i];
  out[0] = in[0]->reshaped({a, b});
  return Status();
}

Result<std::vector<int64_t>> axes_arg(const Node& n, const Ins& in, size_t input_index, int since) {
  if (n.opset >= since) {
    if (in.size() > input_index && in[input_index]) return to_i64_vector(*in[input_index]);
    return std::vector<int64_t>{};
  }
  return n.attr_ints("axes");
}

Status op_squeeze(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  POWER_ASSIGN_OR_RETURN(auto axes, axes_arg(n, in, 1, 13));
  const Shape& xs = in[0]->shape;
  std::vector<bool> drop(xs.size(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < xs.size(); ++i) drop[i] = xs[i] == 1;
  }
  for (int64_t a : axes) {
    if (!norm_axis(a, static_cast<int64_t>(xs.size()))) return op_error(n, "axis out of range");
    if (xs[a] != 1) return op_error(n, fmt::format("cannot squeeze axis {} of size {}", a, xs[a]));
    drop[a] = true;
  }
  Shape s;
  for (size_t i = 0; i < xs.size(); ++i)
    if (!drop[i]) s.push_back(xs[i]);
  out[0] = in[0]->reshaped(std::move(s));
  return Status();
}

Status op_unsqueeze(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  POWER_ASSIGN_OR_RETURN(auto axes, axes_arg(n, in, 1, 13));
  const Shape& xs = in[0]->shape;
  int64_t r = static_cast<int64_t>(xs.size() + axes.size());
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) {
    if (!norm_axis(a, r) || ins[a]) return op_error(n, "invalid or repeated axis");
    ins[a] = true;
  }
  Shape s;
  size_t k = 0;
  for (int64_t i = 0; i < r; ++i) s.push_back(ins[i] ? 1 : xs[k++]);
  out[0] = in[0]->reshaped(std::move(s));
  return Status();
}

// Generic strided copy: out[idx] = in[sum(idx[d] * src_stride[d]) + base] over out's shape.
void strided_copy(const Tensor& x, Tensor& y, const std::vector<int64_t>& src_stride,
                  int64_t base) {
  size_t es = dtype_size(x.dtype);
  const uint8_t* src = x.buf->data();
  uint8_t* dst = y.buf->data();
  const Shape& os = y.shape;
  int64_t total = y.numel();
  if (total == 0) return;
  int r = static_cast<int>(os.size());
  if (r == 0) {
    std::memcpy(dst, src + base * es, es);
    return;
  }
  std::vector<int64_t> idx(r, 0);
  int64_t inner = os[r - 1], st = src_stride[r - 1];
  for (int64_t o = 0; o < total; o += inner) {
    int64_t off = base;
    for (int d = 0; d < r - 1; ++d) off += idx[d] * src_stride[d];
    if (st == 1) {
      std::memcpy(dst + o * es, src + off * es, inner * es);
    } else if (es == 4) {
      const float* s4 = reinterpret_cast<const float*>(src) + off;
      float* d4 = reinterpret_cast<float*>(dst) + o;
      for (int64_t j = 0; j < inner; ++j) d4[j] = s4[j * st];
    } else {
      for (int64_t j = 0; j < inner; ++j)
        std::memcpy(dst + (o + j) * es, src + (off + j * st) * es, es);
    }
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
}

Status op_transpose(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  int64_t r = x.rank();
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != r) return op_error(n, "perm length differs from rank");
  std::vector<bool> seen(r, false);
  Shape s(r);
  auto xst = strides_of(x.shape);
  std::vector<int64_t> st(r);
  for (int64_t i = 0; i < r; ++i) {
    int64_t p = perm[i];
    if (!norm_axis(p, r) || seen[p]) return op_error(n, "invalid perm");
    seen[p] = true;
    s[i] = x.shape[p];
    st[i] = xst[p];
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, s));
  strided_copy(x, out[0], st, 0);
  return Status();
}

Status op_concat(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  if (in.empty() || !in[0]) return op_error(n, "needs inputs");
  const Tensor& x0 = *in[0];
  int64_t axis = n.attr_i("axis", 0);
  int64_t r = x0.rank();
  if (!norm_axis(axis, r)) return op_error(n, "axis out of range");
  Shape s = x0.shape;
  s[axis] = 0;
  for (const Tensor* t : in) {
    if (!t) return op_error(n, "omitted input");
    if (t->rank() != r || t->dtype != x0.dtype) return op_error(n, "inputs differ in rank or type");
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && t->shape[d] != x0.shape[d]) return op_error(n, "inputs differ off the axis");
    s[axis] += t->shape[axis];
  }
  // Every output byte is copied from an input below, so the output is not zero-filled first.
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor_uninit(x0.dtype, s));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (int64_t d = axis + 1; d < r; ++d) inner *= s[d];
  const auto es = static_cast<int64_t>(dtype_size(x0.dtype));
  int64_t row = s[axis] * inner;
  int64_t off = 0;
  struct Piece {
    uint8_t* dst;
    const uint8_t* src;
    int64_t bytes;
  };
  std::vector<Piece> pieces;
  for (const Tensor* t : in) {
    int64_t chunk = t->shape[axis] * inner;
    if (chunk == 0) continue;  // an empty input has no bytes (and may have no buffer)
    for (int64_t o = 0; o < outer; ++o)
      pieces.push_back(
          {out[0].buf->data() + (o * row + off) * es, t->buf->data() + o * chunk * es, chunk * es});
    off += chunk;
  }
  // Large outputs (the OCR detector's 7 MiB of feature maps) are copied by the pool's threads,
  // a range of pieces each: for_ranges splits from 64 Ki items, so counting a piece as its
  // bytes / 16 splits outputs from 1 MiB.
  const int64_t per_piece =
      pieces.empty() ? 0
                     : static_cast<int64_t>(out[0].nbytes()) / static_cast<int64_t>(pieces.size());
  for_ranges(ctx.pool, static_cast<int64_t>(pieces.size()), per_piece / 16,
             [&](int64_t b, int64_t e) {
               for (int64_t i = b; i < e; ++i)
                 std::memcpy(pieces[static_cast<size_t>(i)].dst, pieces[static_cast<size_t>(i)].src,
                             static_cast<size_t>(pieces[static_cast<size_t>(i)].bytes));
             });
  return Status();
}

Status op_slice(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, n.opset >= 10 ? 3 : 1));
  const Tensor& x = *in[0];
  int64_t r = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset >= 10) {
    POWER_ASSIGN_OR_RETURN(starts, to_i64_vector(*in[1]));
    POWER_ASSIGN_OR_RETURN(ends, to_i64_vector(*in[2]));
    if (in.size() > 3 && in[3]) {
      POWER_ASSIGN_OR_RETURN(axes, to_i64_vector(*in[3]));
    }
    if (in.size() > 4 && in[4]) {
      POWER_ASSIGN_OR_RETURN(steps, to_i64_vector(*in[4]));
    }
  } else {
    starts = n.attr_ints("starts");
    ends = n.attr_ints("ends");
    axes = n.attr_ints("axes");
  }
  if (starts.size() != ends.size()) return op_error(n, "starts and ends differ in length");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return op_error(n, "argument lengths differ");
  std::vector<int64_t> st(r, 1), begin(r, 0);
  Shape s = x.shape;
  std::vector<int64_t> step_of(r, 1);
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = axes[i];
    if (!norm_axis(a, r) || seen[a]) return op_error(n, "invalid or repeated axis");
    seen[a] = true;
    int64_t dim = x.shape[a], step = steps[i];
    if (step == 0) return op_error(n, "step 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      s[a] = e > b ? (e - b + step - 1) / step : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      s[a] = b > e ? (b - e + (-step) - 1) / (-step) : 0;
    }
    begin[a] = b;
    step_of[a] = step;
  }
  auto xst = strides_of(x.shape);
  int64_t base = 0;
  for (int64_t d = 0; d < r; ++d) {
    if (s[d] > 0) base += begin[d] * xst[d];
    st[d] = xst[d] * step_of[d];
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, s));
  strided_copy(x, out[0], st, base);
  return Status();
}

Status op_gather(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  const Tensor& x = *in[0];
  int64_t axis = n.attr_i("axis", 0);
  if (!norm_axis(axis, x.rank())) return op_error(n, "axis out of range");
  POWER_ASSIGN_OR_RETURN(auto idx, to_i64_vector(*in[1]));
  int64_t dim = x.shape[axis];
  Shape s(x.shape.begin(), x.shape.begin() + axis);
  s.insert(s.end(), in[1]->shape.begin(), in[1]->shape.end());
  s.insert(s.end(), x.shape.begin() + axis + 1, x.shape.end());
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, s));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape[d];
  size_t es = dtype_size(x.dtype);
  int64_t ni = static_cast<int64_t>(idx.size());
  for (int64_t& i : idx) {
    if (i < 0) i += dim;
    if (i < 0 || i >= dim)
      return op_error(n, fmt::format("index out of range for dimension {}", dim));
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j)
      std::memcpy(out[0].buf->data() + ((o * ni + j) * inner) * es,
                  x.buf->data() + ((o * dim + idx[j]) * inner) * es, inner * es);
  return Status();
}

Status op_split(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  int64_t axis = n.attr_i("axis", 0);
  if (!norm_axis(axis, x.rank())) return op_error(n, "axis out of range");
  std::vector<int64_t> split;
  if (n.opset >= 13) {
    if (in.size() > 1 && in[1]) {
      POWER_ASSIGN_OR_RETURN(split, to_i64_vector(*in[1]));
    }
  } else {
    split = n.attr_ints("split");
  }
  int64_t dim = x.shape[axis];
  const size_t n_out = n.outputs.size();
  size_t k = n_out;
  if (split.empty()) {
    if (n.has("num_outputs")) k = static_cast<size_t>(n.attr_i("num_outputs", 1));
    if (k == 0 || k != n_out) return op_error(n, "num_outputs differs from the node's outputs");
    int64_t chunk = (dim + static_cast<int64_t>(k) - 1) / static_cast<int64_t>(k);
    for (size_t i = 0; i < k; ++i)
      split.push_back(std::max<int64_t>(0, std::min(chunk, dim - chunk * static_cast<int64_t>(i))));
  }
  if (split.size() != n_out) return op_error(n, "split sizes differ from output count");
  int64_t sum = 0;
  for (int64_t v : split) {
    if (v < 0) return op_error(n, "negative split");
    sum += v;
  }
  if (sum != dim) return op_error(n, "split sizes do not sum to the axis length");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape[d];
  size_t es = dtype_size(x.dtype);
  int64_t off = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    Shape s = x.shape;
    s[axis] = split[i];
    POWER_ASSIGN_OR_RETURN(out[i], make_tensor(x.dtype, s));
    int64_t chunk = split[i] * inner;
    if (chunk == 0) continue;  // an empty output has no bytes (and may have no buffer)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out[i].buf->data() + o * chunk * es, x.buf->data() + (o * dim * inner + off) * es,
                  chunk * es);
    off += chunk;
  }
  return Status();
}

Status check_pad(const Node& n) {
  std::string mode = n.attr_s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    return op_unsupported(n, fmt::format("pad mode '{}'", mode));
  }
  return Status();
}

Status op_pad(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, n.opset >= 11 ? 2 : 1));
  const Tensor& x = *in[0];
  int64_t r = x.rank();
  std::vector<int64_t> pads;
  double cval = 0;
  if (n.opset >= 11) {
    POWER_ASSIGN_OR_RETURN(pads, to_i64_vector(*in[1]));
    if (in.size() > 2 && in[2]) {
      POWER_ASSIGN_OR_RETURN(auto v, to_f64_vector(*in[2]));
      if (!v.empty()) cval = v[0];
    }
    if (in.size() > 3 && in[3]) {
      POWER_ASSIGN_OR_RETURN(auto axes, to_i64_vector(*in[3]));
      if (pads.size() != axes.size() * 2) return op_error(n, "pads length differs from 2 * axes");
      std::vector<int64_t> full(2 * r, 0);
      for (size_t i = 0; i < axes.size(); ++i) {
        int64_t a = axes[i];
        if (!norm_axis(a, r)) return op_error(n, "axis out of range");
        full[a] = pads[i];
        full[a + r] = pads[i + axes.size()];
      }
      pads = full;
    }
  } else {
    pads = n.attr_ints("pads");
    cval = n.attr_f("value", 0.0f);
  }
  if (static_cast<int64_t>(pads.size()) != 2 * r)
    return op_error(n, "pads must have 2 * rank values");
  std::string mode = n.attr_s("mode", "constant");
  Shape s(r);
  for (int64_t d = 0; d < r; ++d) {
    s[d] = x.shape[d] + pads[d] + pads[d + r];
    if (s[d] < 0) return op_error(n, "pads shrink a dimension below zero");
    if (mode == "reflect" && (pads[d] >= x.shape[d] || pads[d + r] >= x.shape[d]) &&
        (pads[d] > 0 || pads[d + r] > 0)) {
      return op_error(n, "reflect pads must be smaller than the dimension");
    }
    if (mode == "edge" && x.shape[d] == 0 && s[d] > 0)
      return op_error(n, "edge pad of an empty axis");
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, s));
  size_t es = dtype_size(x.dtype);
  // Constant fill value in the element type.
  std::vector<uint8_t> fill(es, 0);
  {
    Tensor c = make_f32({}, {static_cast<float>(cval)});
    switch (x.dtype) {
      case DType::kF32: {
        float v = static_cast<float>(cval);
        std::memcpy(fill.data(), &v, 4);
        break;
      }
      case DType::kF64:
        std::memcpy(fill.data(), &cval, 8);
        break;
      case DType::kI64: {
        int64_t v = static_cast<int64_t>(cval);
        std::memcpy(fill.data(), &v, 8);
        break;
      }
      case DType::kI32: {
        int32_t v = static_cast<int32_t>(cval);
        std::memcpy(fill.data(), &v, 4);
        break;
      }
      default:
        fill[0] = static_cast<uint8_t>(cval);
        break;
    }
  }
  auto xst = strides_of(x.shape);
  const int64_t total = shape_numel(s);
  const int kind = mode == "constant" ? 0 : mode == "edge" ? 1 : 2;  // else reflect
  // The input index along axis d that output index o reads, or -1 where the constant goes.
  auto source = [&](int64_t d, int64_t o) -> int64_t {
    int64_t i = o - pads[d];
    const int64_t dim = x.shape[d];
    if (i >= 0 && i < dim) return i;
    if (kind == 0) return -1;
    if (kind == 1) return std::clamp<int64_t>(i, 0, dim - 1);
    if (dim == 1) return 0;
    while (i < 0 || i >= dim) i = i < 0 ? -i : 2 * (dim - 1) - i;
    return i;
  };
  if (total == 0) return Status();
  uint8_t* dst = out[0].buf->data();
  const uint8_t* src = x.buf->data();
  if (r == 0) {
    std::memcpy(dst, src, es);
    return Status();
  }
  // Row by row along the last axis: the rows' inside run is one copy, the padding element by
  // element.
  const int64_t W = s[r - 1], last = r - 1;
  const int64_t in_lo = std::clamp<int64_t>(pads[last], 0, W);
  const int64_t in_hi = std::clamp<int64_t>(pads[last] + x.shape[last], in_lo, W);
  std::vector<int64_t> idx(static_cast<size_t>(last), 0);
  for (int64_t row = 0; row < total / W; ++row, dst += W * es) {
    int64_t off = 0;
    bool inside = true;
    for (int64_t d = 0; d < last && inside; ++d) {
      const int64_t i = source(d, idx[d]);
      inside = i >= 0;
      off += i * xst[d];
    }
    if (!inside) {
      for (int64_t o = 0; o < W; ++o) std::memcpy(dst + o * es, fill.data(), es);
    } else {
      const uint8_t* xr = src + off * es;
      if (in_hi > in_lo)
        std::memcpy(dst + in_lo * es, xr + (in_lo - pads[last]) * es, (in_hi - in_lo) * es);
      for (int64_t o = 0; o < W; ++o) {
        if (o == in_lo) o = std::max(o, in_hi);
        if (o >= W) break;
        const int64_t i = source(last, o);
        std::memcpy(dst + o * es, i >= 0 ? xr + i * es : fill.data(), es);
      }
    }
    for (int64_t d = last - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return Status();
}

Status op_shape(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  int64_t r = in[0]->rank();
  int64_t b = n.attr_i("start", 0), e = n.attr_i("end", r);
  if (b < 0) b += r;
  if (e < 0) e += r;
  b = std::clamp<int64_t>(b, 0, r);
  e = std::clamp<int64_t>(e, 0, r);
  std::vector<int64_t> v;
  for (int64_t i = b; i < e; ++i) v.push_back(in[0]->shape[i]);
  out[0] = make_i64({static_cast<int64_t>(v.size())}, v);
  return Status();
}

Status op_size(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  out[0] = scalar_i64(in[0]->numel());
  return Status();
}

Status check_constant(const Node& n) {
  if (n.has("sparse_value") || n.has("value_string") || n.has("value_strings")) {
    return op_unsupported(n, "sparse or string constants");
  }
  if (!n.has("value") && !n.has("value_float") && !n.has("value_floats") && !n.has("value_int") &&
      !n.has("value_ints")) {
    return op_error(n, "no value attribute");
  }
  return Status();
}

Status op_constant(const Node& n, const Ins&, Outs& out, OpContext&) {
  if (n.has("value")) {
    out[0] = n.attrs.at("value").t;
  } else if (n.has("value_float")) {
    out[0] = scalar_f32(n.attr_f("value_float", 0));
  } else if (n.has("value_floats")) {
    auto v = n.attr_floats("value_floats");
    out[0] = make_f32({static_cast<int64_t>(v.size())}, v);
  } else if (n.has("value_int")) {
    out[0] = scalar_i64(n.attr_i("value_int", 0));
  } else {
    auto v = n.attr_ints("value_ints");
    out[0] = make_i64({static_cast<int64_t>(v.size())}, v);
  }
  if (!out[0].buf) return op_error(n, "empty value");
  return Status();
}

Status op_constant_of_shape(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  POWER_ASSIGN_OR_RETURN(auto s, to_i64_vector(*in[0]));
  Tensor v = n.has("value") ? n.attrs.at("value").t : scalar_f32(0.0f);
  if (v.numel() != 1) return op_error(n, "value must hold one element");
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(v.dtype, s));
  size_t es = dtype_size(v.dtype);
  for (int64_t i = 0; i < out[0].numel(); ++i)
    std::memcpy(out[0].buf->data() + i * es, v.buf->data(), es);
  return Status();
}

Status op_expand(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  const Tensor& x = *in[0];
  POWER_ASSIGN_OR_RETURN(auto spec, to_i64_vector(*in[1]));
  size_t r = std::max(spec.size(), x.shape.size());
  Shape s(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t a = i + x.shape.size() >= r ? x.shape[i + x.shape.size() - r] : 1;
    int64_t b = i + spec.size() >= r ? spec[i + spec.size() - r] : 1;
    if (a != b && a != 1 && b != 1) return op_error(n, "shape does not broadcast");
    s[i] = a == 1 ? b : a;
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, s));
  auto xst = strides_of(x.shape);
  std::vector<int64_t> st(r, 0);
  for (size_t i = 0; i < x.shape.size(); ++i) {
    size_t o = r - x.shape.size() + i;
    st[o] = x.shape[i] == 1 ? 0 : xst[i];
  }
  strided_copy(x, out[0], st, 0);
  return Status();
}

Status op_tile(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  const Tensor& x = *in[0];
  POWER_ASSIGN_OR_RETURN(auto rep, to_i64_vector(*in[1]));
  int64_t r = x.rank();
  if (static_cast<int64_t>(rep.size()) != r) return op_error(n, "repeats length differs from rank");
  Shape s(r);
  for (int64_t d = 0; d < r; ++d) {
    if (rep[d] < 0) return op_error(n, "negative repeat");
    s[d] = x.shape[d] * rep[d];
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, s));
  auto xst = strides_of(x.shape);
  size_t es = dtype_size(x.dtype);
  std::vector<int64_t> idx(r, 0);
  for (int64_t o = 0; o < out[0].numel(); ++o) {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) off += (idx[d] % x.shape[d]) * xst[d];
    std::memcpy(out[0].buf->data() + o * es, x.buf->data() + off * es, es);
    for (int64_t d = r - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return Status();
}

Status op_range(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 3));
  POWER_ASSIGN_OR_RETURN(auto b, to_f64_vector(*in[0]));
  POWER_ASSIGN_OR_RETURN(auto e, to_f64_vector(*in[1]));
  POWER_ASSIGN_OR_RETURN(auto d, to_f64_vector(*in[2]));
  if (b.size() != 1 || e.size() != 1 || d.size() != 1 || d[0] == 0)
    return op_error(n, "needs scalar start/limit/nonzero delta");
  double cnt = std::ceil((e[0] - b[0]) / d[0]);
  int64_t count = std::max<int64_t>(0, static_cast<int64_t>(cnt));
  if (count > (int64_t{1} << 30)) return op_error(n, "range too long");
  DType dt = in[0]->dtype;
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(dt, {count}));
  for (int64_t i = 0; i < count; ++i) {
    switch (dt) {
      case DType::kF32:
        out[0].mutable_data<float>()[i] =
            static_cast<float>(in[0]->data<float>()[0] + i * in[2]->data<float>()[0]);
        break;
      case DType::kF64:
        out[0].mutable_data<double>()[i] = b[0] + i * d[0];
        break;
      case DType::kI64:
        out[0].mutable_data<int64_t>()[i] =
            static_cast<int64_t>(b[0]) + i * static_cast<int64_t>(d[0]);
        break;
      case DType::kI32:
        out[0].mutable_data<int32_t>()[i] = static_cast<int32_t>(b[0] + i * d[0]);
        break;
      default:
        return op_unsupported(n, "element type");
    }
  }
  return Status();
}

// ---- reductions ----

enum class Red { kMean, kSum, kMax, kMin, kSumSquare, kL2, kL1, kProd, kLogSumExp };

Status reduce(const Node& n, const Ins& in, Outs& out, Red kind, int axes_input_since) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  if (x.dtype == DType::kBool) return op_unsupported(n, "bool input");
  POWER_ASSIGN_OR_RETURN(auto axes, axes_arg(n, in, 1, axes_input_since));
  int64_t r = x.rank();
  bool keep = n.attr_i("keepdims", 1) != 0;
  std::vector<bool> red(r, false);
  if (axes.empty()) {
    if (n.attr_i("noop_with_empty_axes", 0) != 0) {
      out[0] = x;
      POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, x.shape));
      std::memcpy(out[0].buf->data(), x.buf->data(), x.nbytes());
      return Status();
    }
    red.assign(r, true);
  }
  for (int64_t a : axes) {
    if (!norm_axis(a, r)) return op_error(n, "axis out of range");
    red[a] = true;
  }
  Shape s, kept;
  for (int64_t d = 0; d < r; ++d) {
    if (!red[d])
      s.push_back(x.shape[d]);
    else if (keep)
      s.push_back(1);
    kept.push_back(red[d] ? 1 : x.shape[d]);
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, s));
  int64_t on = shape_numel(kept);
  std::vector<double> acc(on, 0.0);
  double init = 0;
  if (kind == Red::kMax) init = -INFINITY;
  if (kind == Red::kMin) init = INFINITY;
  if (kind == Red::kProd) init = 1;
  std::fill(acc.begin(), acc.end(), init);
  auto kst = strides_of(kept);
  std::vector<int64_t> idx(r, 0);
  POWER_ASSIGN_OR_RETURN(const std::vector<double> px, to_f64_vector(x));
  int64_t total = x.numel();
  std::vector<double> mx;
  if (kind == Red::kLogSumExp) {  // max first for stability
    mx.assign(on, -INFINITY);
    std::vector<int64_t> j(r, 0);
    for (int64_t i = 0; i < total; ++i) {
      int64_t o = 0;
      for (int64_t d = 0; d < r; ++d) o += (red[d] ? 0 : j[d]) * kst[d];
      mx[o] = std::max<double>(mx[o], px[i]);
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++j[d] < x.shape[d]) break;
        j[d] = 0;
      }
    }
  }
  for (int64_t i = 0; i < total; ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < r; ++d) o += (red[d] ? 0 : idx[d]) * kst[d];
    double v = px[i];
    switch (kind) {
      case Red::kMean:
      case Red::kSum:
        acc[o] += v;
        break;
      case Red::kMax:
        acc[o] = std::max(acc[o], v);
        break;
      case Red::kMin:
        acc[o] = std::min(acc[o], v);
        break;
      case Red::kSumSquare:
      case Red::kL2:
        acc[o] += v * v;
        break;
      case Red::kL1:
        acc[o] += std::fabs(v);
        break;
      case Red::kProd:
        acc[o] *= v;
        break;
      case Red::kLogSumExp:
        acc[o] += std::exp(v - mx[o]);
        break;
    }
    for (int64_t d = r - 1; d >= 0; --d) {
      if (++idx[d] < x.shape[d]) break;
      idx[d] = 0;
    }
  }
  int64_t count = on == 0 ? 0 : total / std::max<int64_t>(on, 1);
  for (int64_t o = 0; o < on; ++o) {
    double v = acc[o];
    if (kind == Red::kMean) v = count ? v / static_cast<double>(count) : NAN;
    if (kind == Red::kL2) v = std::sqrt(v);
    if (kind == Red::kLogSumExp) v = std::log(v) + mx[o];
    store_f64(out[0], o, v);
  }
  return Status();
}

Status op_reduce_mean(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kMean, 18);
}
Status op_reduce_sum(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kSum, 13);
}
Status op_reduce_max(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kMax, 18);
}
Status op_reduce_min(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kMin, 18);
}
Status op_reduce_sum_square(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kSumSquare, 18);
}
Status op_reduce_l2(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kL2, 18);
}
Status op_reduce_l1(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kL1, 18);
}
Status op_reduce_prod(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kProd, 18);
}
Status op_reduce_log_sum_exp(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return reduce(n, in, out, Red::kLogSumExp, 18);
}

// Softmax / LogSoftmax: opset < 13 flattens to [prod(dims < axis), prod(dims >= axis)].
// Softmax over contiguous rows (the last axis: attention scores, a recognizer's classes) is the
// kernels layer's power::softmax, which the language models use: its AVX2 path takes a vector
// exp (within a few ulp of std::exp), so the ISA paths differ in the last bits.
Status softmax(const Node& n, const Ins& in, Outs& out, bool log) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  POWER_RETURN_IF_ERROR(need_f32(n, &x, "input"));
  int64_t r = x.rank();
  int64_t axis = n.attr_i("axis", n.opset >= 13 ? -1 : 1);
  if (r == 0) return op_error(n, "scalar input");
  if (!norm_axis(axis, r)) return op_error(n, "axis out of range");
  int64_t outer = 1, len = 1, inner = 1;
  if (n.opset >= 13) {
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
    len = x.shape[axis];
    for (int64_t d = axis + 1; d < r; ++d) inner *= x.shape[d];
  } else {
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
    for (int64_t d = axis; d < r; ++d) len *= x.shape[d];
  }
  const float* px = x.data<float>();
  if (inner == 1 && !log) {
    POWER_ASSIGN_OR_RETURN(out[0], make_tensor_uninit(DType::kF32, x.shape));
    float* py = out[0].mutable_data<float>();
    if (out[0].numel() > 0) std::memcpy(py, px, static_cast<size_t>(out[0].numel()) * 4);
    for (int64_t o = 0; o < outer; ++o) power::softmax(py + o * len, len);
    return Status();
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(DType::kF32, x.shape));
  float* py = out[0].mutable_data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float* xs = px + o * len * inner + i;
      float* ys = py + o * len * inner + i;
      float m = -INFINITY;
      for (int64_t k = 0; k < len; ++k) m = std::max(m, xs[k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) {
        float e = std::exp(xs[k * inner] - m);
        ys[k * inner] = e;
        sum += e;
      }
      if (log) {
        float ls = static_cast<float>(std::log(sum));
        for (int64_t k = 0; k < len; ++k) ys[k * inner] = xs[k * inner] - m - ls;
      } else {
        float inv = static_cast<float>(1.0 / sum);
        for (int64_t k = 0; k < len; ++k) ys[k * inner] *= inv;
      }
    }
  return Status();
}
Status op_softmax(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return softmax(n, in, out, false);
}
Status op_log_softmax(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return softmax(n, in, out, true);
}

Status op_argmax(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  POWER_RETURN_IF_ERROR(need_f32(n, &x, "input"));
  int64_t axis = n.attr_i("axis", 0);
  if (!norm_axis(axis, x.rank())) return op_error(n, "axis out of range");
  bool keep = n.attr_i("keepdims", 1) != 0, last = n.attr_i("select_last_index", 0) != 0;
  bool is_min = n.op == "ArgMin";
  int64_t outer = 1, len = x.shape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape[d];
  Shape s = x.shape;
  if (keep)
    s[axis] = 1;
  else
    s.erase(s.begin() + axis);
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(DType::kI64, s));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      float bv = x.data<float>()[o * len * inner + i];
      for (int64_t k = 1; k < len; ++k) {
        float v = x.data<float>()[(o * len + k) * inner + i];
        bool better = is_min ? (v < bv || (last && v == bv)) : (v > bv || (last && v == bv));
        if (better) {
          bv = v;
          best = k;
        }
      }
      out[0].mutable_data<int64_t>()[o * inner + i] = best;
    }
  return Status();
}

}  // namespace

void register_tensor_ops(std::vector<OpDef>& ops) {
  ops.insert(ops.end(), {
                            {"Identity", op_identity, nullptr, true},
                            {"Reshape", op_reshape, nullptr, true},
                            {"Flatten", op_flatten, nullptr, true},
                            {"Squeeze", op_squeeze, nullptr, true},
                            {"Unsqueeze", op_unsqueeze, nullptr, true},
                            {"Transpose", op_transpose, nullptr, false},
                            {"Concat", op_concat, nullptr, false},
                            {"Slice", op_slice, nullptr, false},
                            {"Gather", op_gather, nullptr, false},
                            {"Split", op_split, nullptr, false},
                            {"Pad", op_pad, check_pad, false},
                            {"Shape", op_shape, nullptr, false},
                            {"Size", op_size, nullptr, false},
                            {"Constant", op_constant, check_constant, false},
                            {"ConstantOfShape", op_constant_of_shape, nullptr, false},
                            {"Expand", op_expand, nullptr, false},
                            {"Tile", op_tile, nullptr, false},
                            {"Range", op_range, nullptr, false},
                            {"ReduceMean", op_reduce_mean, nullptr, false},
                            {"ReduceSum", op_reduce_sum, nullptr, false},
                            {"ReduceMax", op_reduce_max, nullptr, false},
                            {"ReduceMin", op_reduce_min, nullptr, false},
                            {"ReduceSumSquare", op_reduce_sum_square, nullptr, false},
                            {"ReduceL2", op_reduce_l2, nullptr, false},
                            {"ReduceL1", op_reduce_l1, nullptr, false},
                            {"ReduceProd", op_reduce_prod, nullptr, false},
                            {"ReduceLogSumExp", op_reduce_log_sum_exp, nullptr, false},
                            {"Softmax", op_softmax, nullptr, false},
                            {"LogSoftmax", op_log_softmax, nullptr, false},
                            {"ArgMax", op_argmax, nullptr, false},
                            {"ArgMin", op_argmax, nullptr, false},
                        });
}

}  // namespace power::onnx
