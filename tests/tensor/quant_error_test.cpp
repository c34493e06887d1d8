// Quantization error of our quantizers on the fixture sources: quantize(tN.src.f32), then
// dequantize, and check every element against a per-type bound stated and derived below, and
// the RMSE against the peer's own RMSE for its bytes (tN.raw.bin dequantized = tN.f32).
//
// The block fields this test reads (scales) are decoded here from the ggml block layouts
// (ggml-common.h), independently of src/tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "quant_fixture.h"
#include "tensor/half.h"
#include "tensor/quant.h"

namespace power {
namespace {

using testing::FixtureMeta;
using testing::read_f32;

// Half an f16 ulp of |v|: 2^-11 |v| in the normal range, 2^-25 (half the subnormal spacing)
// below it. Rounding an f32 scale to f16 moves it by at most this much.
double f16_err(double v) {
  return std::max(std::fabs(v) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
}

double f16_at(const uint8_t* p) {
  return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

constexpr int8_t kIQ4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                             1,    13,   25,  38,  53,  69,  89,  113};

// The values a sub-block can represent after quantization (its "grid"), plus how far the
// quantizer may stray from the nearest grid point because it chose levels with the f32 scale
// while the block stores the f16-rounded one (slack).
struct Grid {
  std::vector<double> points;
  double slack = 0.0;
};

double dist_to_grid(double x, const Grid& g) {
  double best = INFINITY;
  for (double p : g.points) best = std::min(best, std::fabs(x - p));
  return best;
}

Grid affine_grid(double step, double offset, int lo, int hi, double slack) {
  Grid g;
  for (int l = lo; l <= hi; ++l) g.points.push_back(step * l + offset);
  g.slack = slack;
  return g;
}

int q3k_scale6(const uint8_t* sc, int j) {
  const int low = j < 8 ? (sc[j] & 15) : (sc[j - 8] >> 4);
  const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

void k4_scale_min6(const uint8_t* q, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Grid of the sub-block holding element e (0-based within the block) of a stored block.
//  * Q4_0/Q5_0/Q8_0: {d (l - z)}; Q4_1/Q5_1: {d l + m}. Levels are picked with the f32 d, stored
//    as f16: picking with d instead of d16 can cost at most 2 * max|level| * |d - d16| (once to
//    move the chosen point, once to move the truly nearest one).
//  * K-quants: levels are re-derived against the stored scales, so the slack is only f32
//    rounding. Q2_K/Q4_K/Q5_K: {d*sc*l - dmin*m}; Q3_K/Q6_K: {d*sc*l}.
//  * IQ4_NL/IQ4_XS: {s * level} with s = d (NL) or d*(ls-32) (XS); levels picked with the f32
//    scale, so slack 2 * 127 * |s - s16|.
Grid grid_for(GgmlType type, const uint8_t* b, int e) {
  switch (type) {
    case GgmlType::Q4_0: {
      const double d = f16_at(b);
      return affine_grid(d, 0, -8, 7, 2 * 8 * f16_err(d));
    }
    case GgmlType::Q5_0: {
      const double d = f16_at(b);
      return affine_grid(d, 0, -16, 15, 2 * 16 * f16_err(d));
    }
    case GgmlType::Q8_0: {
      const double d = f16_at(b);
      return affine_grid(d, 0, -128, 127, 2 * 127 * f16_err(d));
    }
    case GgmlType::Q4_1: {
      const double d = f16_at(b), m = f16_at(b + 2);
      return affine_grid(d, m, 0, 15, 2 * (15 * f16_err(d) + f16_err(m)));
    }
    case GgmlType::Q5_1: {
      const double d = f16_at(b), m = f16_at(b + 2);
      return affine_grid(d, m, 0, 31, 2 * (31 * f16_err(d) + f16_err(m)));
    }
    case GgmlType::Q2_K: {  // scales[16] qs[64] d dmin
      const uint8_t sc = b[e / 16];
      const double d = f16_at(b + 80) * (sc & 15), m = f16_at(b + 82) * (sc >> 4);
      return affine_grid(d, -m, 0, 3, 0);
    }
    case GgmlType::Q3_K: {  // hmask[32] qs[64] scales[12] d
      const double d = f16_at(b + 108) * q3k_scale6(b + 96, e / 16);
      return affine_grid(d, 0, -4, 3, 0);
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {  // d dmin scales[12] ...
      int sc = 0, m = 0;
      k4_scale_min6(b + 4, e / 32, &sc, &m);
      const double d = f16_at(b) * sc, dm = f16_at(b + 2) * m;
      return affine_grid(d, -dm, 0, type == GgmlType::Q4_K ? 15 : 31, 0);
    }
    case GgmlType::Q6_K: {  // ql[128] qh[64] scales[16] d
      const double d = f16_at(b + 208) * static_cast<int8_t>(b[192 + e / 16]);
      return affine_grid(d, 0, -32, 31, 0);
    }
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: {
      double s = f16_at(b);
      double s_err = f16_err(s);
      if (type == GgmlType::IQ4_XS) {  // d scales_h scales_l[4] qs[128]
        const int ib = e / 32;
        const int scales_h = b[2] | (b[3] << 8);
        const int ls =
            ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
        s *= ls - 32;
        s_err *= std::abs(ls - 32);
      }
      Grid g;
      for (int8_t v : kIQ4) g.points.push_back(s * v);
      g.slack = 2 * 127 * s_err;
      return g;
    }
    default:
      return Grid{};
  }
}

// A-priori bound for the types whose scale is a fixed function of the block (no search), from
// the source block alone:
//  * Q8_0: d = amax/127; |x/d| <= 127 so rounding costs d/2; storing d as f16 moves the value
//    of level q by |q| |d - d16| <= 127 f16_err(d).
//  * Q4_0: d = max/-8 (max = element of largest magnitude, so level -8 is exact for it); the
//    opposite extreme maps to +8, clamped to 7: error up to |d| there, else |d|/2. Per element
//    max(|d|/2, |x| - 7|d|) + 8 f16_err(d).  Q5_0: the same with 16 and 15.
//  * Q4_1: d = (max-min)/15, levels from min: d/2 + 15 f16_err(d) + f16_err(min).
//    Q5_1: d = (max-min)/31: d/2 + 31 f16_err(d) + f16_err(min).
//  * F16: half an ulp, 2^-11 relative (2^-25 absolute below 2^-14). BF16: 2^-8 relative.
// Each gets 1e-5 * (block amax) for f32 rounding in x*id, x - min and the dequant arithmetic.
bool a_priori_bound(GgmlType type, const float* x, int n, std::vector<double>* bound) {
  bound->assign(static_cast<size_t>(n), 0.0);
  if (type == GgmlType::F16 || type == GgmlType::BF16) {
    for (int i = 0; i < n; ++i) {
      (*bound)[i] = type == GgmlType::F16 ? f16_err(x[i]) : std::ldexp(std::fabs(double{x[i]}), -8);
    }
    return true;
  }
  if (type != GgmlType::Q8_0 && type != GgmlType::Q4_0 && type != GgmlType::Q5_0 &&
      type != GgmlType::Q4_1 && type != GgmlType::Q5_1) {
    return false;
  }
  for (int b = 0; b < n; b += 32) {
    double amax = 0, vmax = 0, lo = INFINITY, hi = -INFINITY;
    for (int j = b; j < b + 32; ++j) {
      if (std::fabs(double{x[j]}) > amax) {
        amax = std::fabs(double{x[j]});
        vmax = x[j];
      }
      lo = std::min(lo, double{x[j]});
      hi = std::max(hi, double{x[j]});
    }
    for (int j = b; j < b + 32; ++j) {
      const double ax = std::fabs(double{x[j]});
      double e = 0;
      switch (type) {
        case GgmlType::Q8_0: {
          const double d = amax / 127;
          e = d / 2 + 127 * f16_err(d);
          break;
        }
        case GgmlType::Q4_0:
        case GgmlType::Q5_0: {
          const double z = type == GgmlType::Q4_0 ? 8 : 16;
          const double d = std::fabs(vmax) / z;
          e = std::max(d / 2, ax - (z - 1) * d) + z * f16_err(d);
          break;
        }
        default: {
          const double levels = type == GgmlType::Q4_1 ? 15 : 31;
          const double d = (hi - lo) / levels;
          e = d / 2 + levels * f16_err(d) + f16_err(lo);
          break;
        }
      }
      (*bound)[j] = e + 1e-5 * amax;
    }
  }
  return true;
}

class QuantError : public ::testing::TestWithParam<std::string> {
 protected:
  GgmlType type() const { return *ggml_type_from_name(GetParam()); }
};

TEST_P(QuantError, RoundTripWithinFormatBoundAndNoWorseThanPeer) {
  POWER_REQUIRE_SHARED();
  FixtureMeta meta;
  ASSERT_TRUE(testing::load_fixture_meta(GetParam(), &meta));
  const GgmlTypeInfo& info = ggml_type_info(type());
  for (const auto& t : meta.tensors) {
    const std::vector<float> src = read_f32(meta.path(t.src));
    const std::vector<float> peer = read_f32(meta.path(t.dequant));
    ASSERT_EQ(src.size(), static_cast<size_t>(t.ne0 * t.ne1));
    ASSERT_EQ(peer.size(), src.size());
    const uint64_t row_bytes = testing::row_bytes_of(type(), t.ne0);
    std::vector<uint8_t> q(row_bytes);
    std::vector<float> back(static_cast<size_t>(t.ne0));
    std::vector<double> bound;
    for (int64_t r = 0; r < t.ne1; ++r) {
      const float* x = src.data() + r * t.ne0;
      ASSERT_TRUE(quantize_row(type(), x, q.data(), t.ne0).ok());
      ASSERT_TRUE(dequantize_row(type(), q.data(), back.data(), t.ne0).ok());
      const bool have_a_priori = a_priori_bound(type(), x, static_cast<int>(t.ne0), &bound);
      double se_ours = 0, se_peer = 0;
      int failures = 0;
      for (int64_t i = 0; i < t.ne0; ++i) {
        const double err = std::fabs(double{back[i]} - x[i]);
        se_ours += err * err;
        const double perr = double{peer[r * t.ne0 + i]} - x[i];
        se_peer += perr * perr;
        if (have_a_priori && err > bound[i] && failures++ < 3) {
          ADD_FAILURE() << t.name << " row " << r << " element " << i << ": |err| " << err
                        << " > a-priori bound " << bound[i];
        }
        if (info.block_elems > 1) {
          // Nearest-level property: the element is encoded by (one of) the grid points of its
          // sub-block closest to it, so |err| <= half the sub-block step inside the grid's
          // range and the distance to the end level outside it.
          const int64_t blk = i / info.block_elems;
          const Grid g = grid_for(type(), q.data() + blk * info.block_bytes,
                                  static_cast<int>(i % info.block_elems));
          ASSERT_FALSE(g.points.empty());
          const double allowed = dist_to_grid(x[i], g) + g.slack +
                                 1e-6 * (std::fabs(double{x[i]}) + std::fabs(g.points.front()) +
                                         std::fabs(g.points.back()));
          if (err > allowed && failures++ < 3) {
            ADD_FAILURE() << t.name << " row " << r << " element " << i << ": |err| " << err
                          << " but the nearest grid point is " << dist_to_grid(x[i], g) << " away";
          }
        }
      }
      // RMSE no worse than 1.05x the peer's on the same row (ours equals the peer's when the
      // bytes are identical; 5% leaves room for a re-implementation that breaks a near-tie in
      // the scale search differently, which changes a row's RMSE by far less than that).
      const double rmse_ours = std::sqrt(se_ours / t.ne0), rmse_peer = std::sqrt(se_peer / t.ne0);
      EXPECT_LE(rmse_ours, 1.05 * rmse_peer + 1e-30) << t.name << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Peer, QuantError, ::testing::ValuesIn(testing::fixture_type_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace power
