// Elementwise kernels: numpy-broadcast binary arithmetic and comparisons, unary activations,
// Clip, Cast, Where.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/ops.h"
#include "onnx/ops_internal.h"

namespace power::onnx {

Status need_inputs(const Node& n, const Ins& in, size_t min_count) {
  if (in.size() < min_count)
    return op_error(n, fmt::format("needs {} inputs, has {}", min_count, in.size()));
  for (size_t i = 0; i < min_count; ++i)
    if (!in[i]) return op_error(n, fmt::format("input {} is required", i));
  return Status();
}

void store_f64(Tensor& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::kF32:
      t.mutable_data<float>()[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      t.mutable_data<double>()[i] = v;
      break;
    case DType::kI64:
      t.mutable_data<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DType::kI32:
      t.mutable_data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kI16:
      t.mutable_data<int16_t>()[i] = static_cast<int16_t>(v);
      break;
    case DType::kU16:
      t.mutable_data<uint16_t>()[i] = static_cast<uint16_t>(v);
      break;
    case DType::kI8:
      t.mutable_data<int8_t>()[i] = static_cast<int8_t>(v);
      break;
    case DType::kU8:
      t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(v);
      break;
    case DType::kBool:
      t.mutable_data<uint8_t>()[i] = v != 0;
      break;
  }
}

Status need_f32(const Node& n, const Tensor* t, const char* what) {
  if (t->dtype != DType::kF32) {
    return op_unsupported(n, fmt::format("{} must be float32, got {}", what, dtype_name(t->dtype)));
  }
  return Status();
}

namespace {

// Output shape of numpy-style broadcasting; false when incompatible.
bool broadcast_shape(const std::vector<const Shape*>& shapes, Shape& out) {
  size_t rank = 0;
  for (auto* s : shapes) rank = std::max(rank, s->size());
  out.assign(rank, 1);
  for (auto* s : shapes) {
    size_t off = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      int64_t d = (*s)[i];
      int64_t& o = out[off + i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      return false;
    }
  }
  return true;
}

// Strides of `s` inside the broadcast output shape `out` (0 along broadcast axes).
std::vector<int64_t> bstrides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    size_t o = out.size() - s.size() + static_cast<size_t>(i);
    st[o] = s[i] == 1 ? 0 : acc;
    acc *= s[i];
  }
  return st;
}

// Calls f(out_index, a_index, b_index, n, a_step, b_step) for each innermost-axis row of the
// output in rows [r0, r1) (all rows by default), walking the row in a tight loop.
template <typename F>
void for_broadcast(const Shape& out, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb,
                   F f, int64_t r0 = 0, int64_t r1 = -1) {
  int64_t total = shape_numel(out);
  if (total == 0) return;
  int r = static_cast<int>(out.size());
  if (r == 0) {
    f(0, 0, 0, 1, 0, 0);
    return;
  }
  int64_t inner = out[r - 1];
  if (r1 < 0) r1 = total / inner;
  int64_t ia_step = sa[r - 1], ib_step = sb[r - 1];
  std::vector<int64_t> idx(r, 0);
  for (int64_t d = r - 2, rest = r0; d >= 0; --d) {  // row r0's index
    idx[d] = rest % out[d];
    rest /= out[d];
  }
  for (int64_t row = r0; row < r1; ++row) {
    int64_t ia = 0, ib = 0;
    for (int d = 0; d < r - 1; ++d) {
      ia += idx[d] * sa[d];
      ib += idx[d] * sb[d];
    }
    f(row * inner, ia, ib, inner, ia_step, ib_step);
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

enum class Bin {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kEqual,
  kLess,
  kGreater,
  kLessEq,
  kGreaterEq,
  kAnd,
  kOr,
  kXor,
  kMax,
  kMin,
  kMod,
  kFmod
};

template <typename T>
T apply(Bin op, T a, T b) {
  switch (op) {
    case Bin::kAdd:
      return a + b;
    case Bin::kSub:
      return a - b;
    case Bin::kMul:
      return a * b;
    case Bin::kDiv:
      if constexpr (std::is_integral_v<T>)
        return b == 0 ? T(0) : static_cast<T>(a / b);
      else
        return a / b;
    case Bin::kPow:
      return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
    case Bin::kMax:
      return std::max(a, b);
    case Bin::kMin:
      return std::min(a, b);
    case Bin::kFmod:
      if constexpr (std::is_integral_v<T>) {
        return b == 0 ? T(0) : static_cast<T>(a % b);
      } else {
        return std::fmod(a, b);
      }
    case Bin::kMod:
      if constexpr (std::is_integral_v<T>) {
        if (b == 0) return 0;
        T m = static_cast<T>(a % b);
        if (m != 0 && ((m < 0) != (b < 0))) m = static_cast<T>(m + b);
        return m;
      } else {
        return std::fmod(a, b);
      }
    default:
      return T(0);
  }
}

template <typename T>
bool compare(Bin op, T a, T b) {
  switch (op) {
    case Bin::kEqual:
      return a == b;
    case Bin::kLess:
      return a < b;
    case Bin::kGreater:
      return a > b;
    case Bin::kLessEq:
      return a <= b;
    case Bin::kGreaterEq:
      return a >= b;
    case Bin::kAnd:
      return a && b;
    case Bin::kOr:
      return a || b;
    case Bin::kXor:
      return (a != 0) != (b != 0);
    default:
      return false;
  }
}

bool is_compare(Bin op) {
  return op == Bin::kEqual || op == Bin::kLess || op == Bin::kGreater || op == Bin::kLessEq ||
         op == Bin::kGreaterEq || op == Bin::kAnd || op == Bin::kOr || op == Bin::kXor;
}

// One broadcast span: po[j] = f(pa[j * da], pb[j * db]). The contiguous and one-side-scalar
// cases (same shapes, a scalar operand, a per-channel [1,C,1,1] operand) are separate loops
// the compiler vectorizes; the general strided loop stays for the rest.
template <typename T, typename F>
inline void arith_span(T* po, const T* pa, const T* pb, int64_t n, int64_t da, int64_t db, F f) {
  if (da == 1 && db == 1) {
    for (int64_t j = 0; j < n; ++j) po[j] = f(pa[j], pb[j]);
  } else if (da == 1 && db == 0) {
    const T y = *pb;
    for (int64_t j = 0; j < n; ++j) po[j] = f(pa[j], y);
  } else if (da == 0 && db == 1) {
    const T x = *pa;
    for (int64_t j = 0; j < n; ++j) po[j] = f(x, pb[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) po[j] = f(pa[j * da], pb[j * db]);
  }
}

// Elementwise f over the broadcast of a and b (strides sa, sb over out's shape). When each
// operand is either the full output or a single element, the whole tensor is one span.
template <typename T, typename F>
void arith_spans(const Shape& out, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb,
                 const T* pa, const T* pb, T* po, F f, ThreadPool* pool) {
  const int64_t total = shape_numel(out);
  auto flat = [&](const std::vector<int64_t>& st) -> int64_t {  // 1 full, 0 scalar, -1 neither
    bool zero = true, full = true;
    int64_t expect = 1;
    for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
      if (st[d] != 0) zero = false;
      if (out[d] != 1 && st[d] != expect) full = false;
      expect *= out[d];
    }
    return full ? 1 : (zero ? 0 : -1);
  };
  const int64_t fa = flat(sa), fb = flat(sb);
  if (fa >= 0 && fb >= 0) {
    for_ranges(pool, total, 1, [&](int64_t b, int64_t e) {
      arith_span(po + b, pa + b * fa, pb + b * fb, e - b, fa, fb, f);
    });
    return;
  }
  const int64_t inner = out.empty() ? 1 : out.back();
  for_ranges(pool, inner > 0 ? total / inner : 0, inner, [&](int64_t r0, int64_t r1) {
    for_broadcast(
        out, sa, sb,
        [&](int64_t o, int64_t ia, int64_t ib, int64_t n, int64_t da, int64_t db) {
          arith_span(po + o, pa + ia, pb + ib, n, da, db, f);
        },
        r0, r1);
  });
}

// Float arithmetic goes to the pool (pool may be null); other types and comparisons run here.
template <typename T>
void binary_typed(Bin op, const Tensor& a, const Tensor& b, Tensor& out,
                  const std::vector<int64_t>& sa, const std::vector<int64_t>& sb,
                  ThreadPool* pool = nullptr) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  if (is_compare(op)) {
    uint8_t* po = out.mutable_data<uint8_t>();
    for_broadcast(out.shape, sa, sb,
                  [&](int64_t o, int64_t ia, int64_t ib, int64_t n, int64_t da, int64_t db) {
                    for (int64_t j = 0; j < n; ++j)
                      po[o + j] = compare<T>(op, pa[ia + j * da], pb[ib + j * db]);
                  });
    return;
  }
  T* po = out.mutable_data<T>();
  switch (op) {
    case Bin::kAdd:
      return arith_spans<T>(
          out.shape, sa, sb, pa, pb, po, [](T x, T y) { return x + y; }, pool);
    case Bin::kSub:
      return arith_spans<T>(
          out.shape, sa, sb, pa, pb, po, [](T x, T y) { return x - y; }, pool);
    case Bin::kMul:
      return arith_spans<T>(
          out.shape, sa, sb, pa, pb, po, [](T x, T y) { return x * y; }, pool);
    case Bin::kDiv:
      if constexpr (std::is_floating_point_v<T>) {
        return arith_spans<T>(
            out.shape, sa, sb, pa, pb, po, [](T x, T y) { return x / y; }, pool);
      }
      break;
    case Bin::kPow:
      // A float squared: pow in double gives the exact square of a float (48 bits of
      // significand), and rounding that to float gives the product's bits, without a pow call.
      if constexpr (std::is_same_v<T, float>) {
        if (b.numel() == 1 && pb[0] == 2.0f) {
          return arith_spans<T>(
              out.shape, sa, sb, pa, pb, po, [](T x, T) { return x * x; }, pool);
        }
      }
      break;
    default:
      break;
  }
  arith_spans<T>(
      out.shape, sa, sb, pa, pb, po, [op](T x, T y) { return apply<T>(op, x, y); }, pool);
}

Status binary(const Node& n, const Ins& in, Outs& out, Bin op, ThreadPool* pool = nullptr) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  if (op == Bin::kPow && a.dtype != b.dtype) {
    // Pow's exponent may have another type; the result has the base's type.
    Shape os;
    if (!broadcast_shape({&a.shape, &b.shape}, os)) return op_error(n, "shapes do not broadcast");
    POWER_ASSIGN_OR_RETURN(out[0], make_tensor(a.dtype, os));
    POWER_ASSIGN_OR_RETURN(auto av, to_f64_vector(a));
    POWER_ASSIGN_OR_RETURN(auto bv, to_f64_vector(b));
    auto sa = bstrides(a.shape, os), sb = bstrides(b.shape, os);
    Tensor& y = out[0];
    for_broadcast(os, sa, sb,
                  [&](int64_t o, int64_t ia, int64_t ib, int64_t cnt, int64_t da, int64_t db) {
                    for (int64_t j = 0; j < cnt; ++j)
                      store_f64(y, o + j, std::pow(av[ia + j * da], bv[ib + j * db]));
                  });
    return Status();
  }
  if (a.dtype != b.dtype) {
    return op_error(n, fmt::format("operand types differ: {} and {}", dtype_name(a.dtype),
                                   dtype_name(b.dtype)));
  }
  Shape os;
  if (!broadcast_shape({&a.shape, &b.shape}, os)) {
    return op_error(n, fmt::format("shapes {} and {} do not broadcast", shape_str(a.shape),
                                   shape_str(b.shape)));
  }
  DType odt = is_compare(op) ? DType::kBool : a.dtype;
  // The float32 kernels write every output element (a broadcast visits each once).
  POWER_ASSIGN_OR_RETURN(
      out[0], a.dtype == DType::kF32 ? make_tensor_uninit(odt, os) : make_tensor(odt, os));
  auto sa = bstrides(a.shape, os), sb = bstrides(b.shape, os);
  switch (a.dtype) {
    case DType::kF32:
      binary_typed<float>(op, a, b, out[0], sa, sb, pool);
      break;
    case DType::kF64:
      binary_typed<double>(op, a, b, out[0], sa, sb);
      break;
    case DType::kI64:
      binary_typed<int64_t>(op, a, b, out[0], sa, sb);
      break;
    case DType::kI32:
      binary_typed<int32_t>(op, a, b, out[0], sa, sb);
      break;
    case DType::kI16:
      binary_typed<int16_t>(op, a, b, out[0], sa, sb);
      break;
    case DType::kI8:
      binary_typed<int8_t>(op, a, b, out[0], sa, sb);
      break;
    case DType::kU8:
      binary_typed<uint8_t>(op, a, b, out[0], sa, sb);
      break;
    case DType::kU16:
      binary_typed<uint16_t>(op, a, b, out[0], sa, sb);
      break;
    case DType::kBool:
      if (op != Bin::kAnd && op != Bin::kOr && op != Bin::kXor && op != Bin::kEqual) {
        return op_unsupported(n, "arithmetic on bool tensors");
      }
      binary_typed<uint8_t>(op, a, b, out[0], sa, sb);
      break;
  }
  return Status();
}

#define BINARY_OP(NAME, OPV)                                                  \
  Status op_##NAME(const Node& n, const Ins& in, Outs& out, OpContext& ctx) { \
    return binary(n, in, out, Bin::OPV, ctx.pool);                            \
  }
BINARY_OP(add, kAdd)
BINARY_OP(sub, kSub)
BINARY_OP(mul, kMul)
BINARY_OP(div, kDiv)
BINARY_OP(pow, kPow)
BINARY_OP(equal, kEqual)
BINARY_OP(less, kLess)
BINARY_OP(greater, kGreater)
BINARY_OP(less_eq, kLessEq)
BINARY_OP(greater_eq, kGreaterEq)
BINARY_OP(and, kAnd)
BINARY_OP(or, kOr)
BINARY_OP(xor, kXor)

Status check_mod(const Node& n) {
  return Status();
}
Status op_mod(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 2));
  if (n.attr_i("fmod", 0) == 0 && (in[0]->dtype == DType::kF32 || in[0]->dtype == DType::kF64)) {
    return op_unsupported(n, "fmod=0 on floating-point inputs");
  }
  return binary(n, in, out, n.attr_i("fmod", 0) != 0 ? Bin::kFmod : Bin::kMod);
}

// Variadic Max/Min/Sum/Mean: folded pairwise (broadcasting).
Status variadic(const Node& n, const Ins& in, Outs& out, Bin op, bool mean) {
  if (in.empty() || !in[0]) return op_error(n, "needs at least one input");
  Tensor acc = *in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i]) return op_error(n, "omitted input");
    Outs tmp(1);
    POWER_RETURN_IF_ERROR(binary(n, {&acc, in[i]}, tmp, op));
    acc = std::move(tmp[0]);
  }
  if (mean) {
    POWER_RETURN_IF_ERROR(need_f32(n, &acc, "input"));
    POWER_ASSIGN_OR_RETURN(Tensor t, make_tensor(acc.dtype, acc.shape));
    for (int64_t i = 0; i < acc.numel(); ++i)
      t.mutable_data<float>()[i] = acc.data<float>()[i] / static_cast<float>(in.size());
    acc = std::move(t);
  } else if (in.size() == 1) {
    POWER_ASSIGN_OR_RETURN(Tensor t, make_tensor(acc.dtype, acc.shape));
    std::memcpy(t.buf->data(), acc.buf->data(), acc.nbytes());
    acc = std::move(t);
  }
  out[0] = std::move(acc);
  return Status();
}
Status op_max(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return variadic(n, in, out, Bin::kMax, false);
}
Status op_min(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return variadic(n, in, out, Bin::kMin, false);
}
Status op_sum(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return variadic(n, in, out, Bin::kAdd, false);
}
Status op_mean(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return variadic(n, in, out, Bin::kAdd, true);
}

// ---- unary float32 ----

template <typename F>
Status unary_f32(const Node& n, const Ins& in, Outs& out, ThreadPool* pool, F f) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  POWER_RETURN_IF_ERROR(need_f32(n, in[0], "input"));
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor_uninit(DType::kF32, in[0]->shape));
  const float* x = in[0]->data<float>();
  float* y = out[0].mutable_data<float>();
  for_ranges(pool, in[0]->numel(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
  return Status();
}

Status op_relu(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, relu_f32);
}
// The kernels layer's sigmoid (vectorized, the same bits on every ISA), as Conv's fused step.
Status op_sigmoid(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  POWER_RETURN_IF_ERROR(need_f32(n, in[0], "input"));
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor_uninit(DType::kF32, in[0]->shape));
  const float* x = in[0]->data<float>();
  float* y = out[0].mutable_data<float>();
  for_ranges(ctx.pool, in[0]->numel(), 1,
             [&](int64_t b, int64_t e) { power::sigmoid(x + b, y + b, e - b); });
  return Status();
}
Status op_tanh(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::tanh(x); });
}
Status op_exp(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::exp(x); });
}
Status op_log(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::log(x); });
}
Status op_sqrt(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::sqrt(x); });
}
Status op_erf(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::erf(x); });
}
Status op_reciprocal(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return 1.0f / x; });
}
Status op_floor(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::floor(x); });
}
Status op_ceil(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::ceil(x); });
}
Status op_sin(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::sin(x); });
}
Status op_cos(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::cos(x); });
}
Status op_softplus(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return std::log(std::exp(x) + 1.0f); });
}
Status op_softsign(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) { return x / (1.0f + std::fabs(x)); });
}
Status op_hard_sigmoid(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  float a = n.attr_f("alpha", 0.2f), b = n.attr_f("beta", 0.5f);
  return unary_f32(n, in, out, ctx.pool, [a, b](float x) { return hard_sigmoid_f32(x, a, b); });
}
Status op_hard_swish(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  return unary_f32(n, in, out, ctx.pool, [](float x) {
    return x * std::max(0.0f, std::min(1.0f, x * (1.0f / 6.0f) + 0.5f));
  });
}
Status op_leaky_relu(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  float a = n.attr_f("alpha", 0.01f);
  return unary_f32(n, in, out, ctx.pool, [a](float x) { return x >= 0 ? x : a * x; });
}
Status op_elu(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  float a = n.attr_f("alpha", 1.0f);
  return unary_f32(n, in, out, ctx.pool,
                   [a](float x) { return x >= 0 ? x : a * (std::exp(x) - 1.0f); });
}

// Neg/Abs/Sign on float or signed integers.
template <typename F>
Status unary_num(const Node& n, const Ins& in, Outs& out, F f) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, x.shape));
  int64_t c = x.numel();
  switch (x.dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < c; ++i) out[0].mutable_data<float>()[i] = f(x.data<float>()[i]);
      break;
    case DType::kF64:
      for (int64_t i = 0; i < c; ++i) out[0].mutable_data<double>()[i] = f(x.data<double>()[i]);
      break;
    case DType::kI64:
      for (int64_t i = 0; i < c; ++i) out[0].mutable_data<int64_t>()[i] = f(x.data<int64_t>()[i]);
      break;
    case DType::kI32:
      for (int64_t i = 0; i < c; ++i) out[0].mutable_data<int32_t>()[i] = f(x.data<int32_t>()[i]);
      break;
    default:
      return op_unsupported(n, fmt::format("element type {}", dtype_name(x.dtype)));
  }
  return Status();
}
Status op_neg(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return unary_num(n, in, out, [](auto x) { return -x; });
}
Status op_abs(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return unary_num(n, in, out, [](auto x) { return x < 0 ? -x : x; });
}
Status op_sign(const Node& n, const Ins& in, Outs& out, OpContext&) {
  return unary_num(n, in, out, [](auto x) { return static_cast<decltype(x)>((x > 0) - (x < 0)); });
}

Status op_not(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  if (in[0]->dtype != DType::kBool) return op_error(n, "input must be bool");
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(DType::kBool, in[0]->shape));
  for (int64_t i = 0; i < in[0]->numel(); ++i)
    out[0].mutable_data<uint8_t>()[i] = !in[0]->data<uint8_t>()[i];
  return Status();
}

Status op_clip(const Node& n, const Ins& in, Outs& out, OpContext& ctx) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  if (x.dtype == DType::kBool) return op_unsupported(n, "bool input");
  double lo = -INFINITY, hi = INFINITY;
  if (n.opset < 11) {
    lo = n.attr_f("min", -INFINITY);
    hi = n.attr_f("max", INFINITY);
  } else {
    for (int k = 1; k <= 2; ++k) {
      if (in.size() > static_cast<size_t>(k) && in[k]) {
        if (in[k]->numel() != 1 || in[k]->dtype != x.dtype)
          return op_error(n, "min/max must be scalars of the input's type");
        POWER_ASSIGN_OR_RETURN(auto v, to_f64_vector(*in[k]));
        (k == 1 ? lo : hi) = v[0];
      }
    }
  }
  if (x.dtype == DType::kF32) {
    float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
    return unary_f32(n, in, out, ctx.pool, [flo, fhi](float v) { return clip_f32(v, flo, fhi); });
  }
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(x.dtype, x.shape));
  POWER_ASSIGN_OR_RETURN(auto xv, to_f64_vector(x));
  for (int64_t i = 0; i < x.numel(); ++i) store_f64(out[0], i, std::min(std::max(xv[i], lo), hi));
  return Status();
}

template <typename S, typename D>
void cast_loop(const Tensor& x, Tensor& y) {
  const S* s = x.data<S>();
  D* d = y.mutable_data<D>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
}

template <typename S>
void cast_from(const Tensor& x, Tensor& y) {
  switch (y.dtype) {
    case DType::kF32:
      cast_loop<S, float>(x, y);
      break;
    case DType::kF64:
      cast_loop<S, double>(x, y);
      break;
    case DType::kI64:
      cast_loop<S, int64_t>(x, y);
      break;
    case DType::kI32:
      cast_loop<S, int32_t>(x, y);
      break;
    case DType::kI16:
      cast_loop<S, int16_t>(x, y);
      break;
    case DType::kU16:
      cast_loop<S, uint16_t>(x, y);
      break;
    case DType::kI8:
      cast_loop<S, int8_t>(x, y);
      break;
    case DType::kU8:
      cast_loop<S, uint8_t>(x, y);
      break;
    case DType::kBool: {
      const S* s = x.data<S>();
      uint8_t* d = y.mutable_data<uint8_t>();
      const int64_t n = x.numel();
      for (int64_t i = 0; i < n; ++i) d[i] = s[i] != S(0);
      break;
    }
  }
}

Status check_cast(const Node& n) {
  if (!dtype_supported(static_cast<int32_t>(n.attr_i("to", 0)))) {
    return op_unsupported(n, fmt::format("cast to element type {}", n.attr_i("to", 0)));
  }
  return Status();
}

Status op_cast(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 1));
  const Tensor& x = *in[0];
  DType to = static_cast<DType>(n.attr_i("to", 1));
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(to, x.shape));
  switch (x.dtype) {
    case DType::kF32:
      cast_from<float>(x, out[0]);
      break;
    case DType::kF64:
      cast_from<double>(x, out[0]);
      break;
    case DType::kI64:
      cast_from<int64_t>(x, out[0]);
      break;
    case DType::kI32:
      cast_from<int32_t>(x, out[0]);
      break;
    case DType::kI16:
      cast_from<int16_t>(x, out[0]);
      break;
    case DType::kU16:
      cast_from<uint16_t>(x, out[0]);
      break;
    case DType::kI8:
      cast_from<int8_t>(x, out[0]);
      break;
    case DType::kU8:
      cast_from<uint8_t>(x, out[0]);
      break;
    case DType::kBool:
      cast_from<uint8_t>(x, out[0]);
      break;
  }
  return Status();
}

Status op_where(const Node& n, const Ins& in, Outs& out, OpContext&) {
  POWER_RETURN_IF_ERROR(need_inputs(n, in, 3));
  const Tensor &c = *in[0], &a = *in[1], &b = *in[2];
  if (c.dtype != DType::kBool) return op_error(n, "condition must be bool");
  if (a.dtype != b.dtype) return op_error(n, "X and Y types differ");
  Shape os;
  if (!broadcast_shape({&c.shape, &a.shape, &b.shape}, os))
    return op_error(n, "shapes do not broadcast");
  POWER_ASSIGN_OR_RETURN(out[0], make_tensor(a.dtype, os));
  auto sc = bstrides(c.shape, os), sa = bstrides(a.shape, os), sb = bstrides(b.shape, os);
  size_t es = dtype_size(a.dtype);
  int64_t total = shape_numel(os);
  std::vector<int64_t> idx(os.size(), 0);
  for (int64_t o = 0; o < total; ++o) {
    int64_t ic = 0, ia = 0, ib = 0;
    for (size_t d = 0; d < os.size(); ++d) {
      ic += idx[d] * sc[d];
      ia += idx[d] * sa[d];
      ib += idx[d] * sb[d];
    }
    const uint8_t* src = c.data<uint8_t>()[ic] ? a.buf->data() + ia * es : b.buf->data() + ib * es;
    std::memcpy(out[0].buf->data() + o * es, src, es);
    for (int d = static_cast<int>(os.size()) - 1; d >= 0; --d) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
  return Status();
}

}  // namespace

void register_elementwise_ops(std::vector<OpDef>& ops) {
  ops.insert(ops.end(), {
                            {"Add", op_add, nullptr, false},
                            {"Sub", op_sub, nullptr, false},
                            {"Mul", op_mul, nullptr, false},
                            {"Div", op_div, nullptr, false},
                            {"Pow", op_pow, nullptr, false},
                            {"Equal", op_equal, nullptr, false},
                            {"Less", op_less, nullptr, false},
                            {"Greater", op_greater, nullptr, false},
                            {"LessOrEqual", op_less_eq, nullptr, false},
                            {"GreaterOrEqual", op_greater_eq, nullptr, false},
                            {"And", op_and, nullptr, false},
                            {"Or", op_or, nullptr, false},
                            {"Xor", op_xor, nullptr, false},
                            {"Mod", op_mod, check_mod, false},
                            {"Max", op_max, nullptr, false},
                            {"Min", op_min, nullptr, false},
                            {"Sum", op_sum, nullptr, false},
                            {"Mean", op_mean, nullptr, false},
                            {"Relu", op_relu, nullptr, false},
                            {"Sigmoid", op_sigmoid, nullptr, false},
                            {"Tanh", op_tanh, nullptr, false},
                            {"Exp", op_exp, nullptr, false},
                            {"Log", op_log, nullptr, false},
                            {"Sqrt", op_sqrt, nullptr, false},
                            {"Erf", op_erf, nullptr, false},
                            {"Reciprocal", op_reciprocal, nullptr, false},
                            {"Floor", op_floor, nullptr, false},
                            {"Ceil", op_ceil, nullptr, false},
                            {"Sin", op_sin, nullptr, false},
                            {"Cos", op_cos, nullptr, false},
                            {"Softplus", op_softplus, nullptr, false},
                            {"Softsign", op_softsign, nullptr, false},
                            {"HardSigmoid", op_hard_sigmoid, nullptr, false},
                            {"HardSwish", op_hard_swish, nullptr, false},
                            {"LeakyRelu", op_leaky_relu, nullptr, false},
                            {"Elu", op_elu, nullptr, false},
                            {"Neg", op_neg, nullptr, false},
                            {"Abs", op_abs, nullptr, false},
                            {"Sign", op_sign, nullptr, false},
                            {"Not", op_not, nullptr, false},
                            {"Clip", op_clip, nullptr, false},
                            {"Cast", op_cast, check_cast, false},
                            {"Where", op_where, nullptr, false},
                        });
}

}  // namespace power::onnx
