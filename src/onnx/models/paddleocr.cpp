#include "onnx/models/paddleocr.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>

#include "base/file.h"

namespace power::onnx {
namespace {

// Bilinear resize with pixel-center alignment (as OpenCV's INTER_LINEAR): put(y, x, c, v) for
// each output sample, v rounded to a byte. The callers write where the samples are needed (the
// models' normalized input tensors) instead of into an intermediate image.
template <class Put>
void resize_bilinear_each(const Image& src, int w, int h, Put&& put) {
  const double sx = static_cast<double>(src.width) / w, sy = static_cast<double>(src.height) / h;
  for (int y = 0; y < h; ++y) {
    double fy = (y + 0.5) * sy - 0.5;
    int y0 = static_cast<int>(std::floor(fy));
    double wy = fy - y0;
    int ya = std::clamp(y0, 0, src.height - 1), yb = std::clamp(y0 + 1, 0, src.height - 1);
    for (int x = 0; x < w; ++x) {
      double fx = (x + 0.5) * sx - 0.5;
      int x0 = static_cast<int>(std::floor(fx));
      double wx = fx - x0;
      int xa = std::clamp(x0, 0, src.width - 1), xb = std::clamp(x0 + 1, 0, src.width - 1);
      for (int c = 0; c < src.channels; ++c) {
        auto at = [&](int yy, int xx) {
          return static_cast<double>(
              src.data[(static_cast<size_t>(yy) * src.width + xx) * src.channels + c]);
        };
        double v = (1 - wy) * ((1 - wx) * at(ya, xa) + wx * at(ya, xb)) +
                   wy * ((1 - wx) * at(yb, xa) + wx * at(yb, xb));
        put(y, x, c, static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)));
      }
    }
  }
}

// put(y, x, c, v) for each sample of the image as it is.
template <class Put>
void each_sample(const Image& src, Put&& put) {
  for (int y = 0; y < src.height; ++y)
    for (int x = 0; x < src.width; ++x)
      for (int c = 0; c < src.channels; ++c)
        put(y, x, c, src.data[(static_cast<size_t>(y) * src.width + x) * src.channels + c]);
}

// The image itself when it is RGB, else its RGB copy (gray repeated) made in `storage`.
const Image& as_rgb(const Image& img, Image& storage) {
  if (img.channels == 3) return img;
  storage.width = img.width;
  storage.height = img.height;
  storage.channels = 3;
  storage.data.resize(img.data.size() * 3);
  for (size_t i = 0; i < img.data.size(); ++i)
    storage.data[i * 3] = storage.data[i * 3 + 1] = storage.data[i * 3 + 2] = img.data[i];
  return storage;
}

using Pt = std::array<double, 2>;

double cross(const Pt& o, const Pt& a, const Pt& b) {
  return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);
}

std::vector<Pt> convex_hull(std::vector<Pt> p) {
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  if (p.size() < 3) return p;
  std::vector<Pt> h(2 * p.size());
  size_t k = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    while (k >= 2 && cross(h[k - 2], h[k - 1], p[i]) <= 0) k--;
    h[k++] = p[i];
  }
  for (size_t i = p.size() - 1, t = k + 1; i > 0; --i) {
    while (k >= t && cross(h[k - 2], h[k - 1], p[i - 1]) <= 0) k--;
    h[k++] = p[i - 1];
  }
  h.resize(k - 1);
  return h;
}

struct RotRect {
  Pt center;
  double w, h;  // along axis u, along axis v
  Pt u, v;      // unit axes
};

// Minimum-area enclosing rectangle of a convex hull (rotating calipers over hull edges).
RotRect min_area_rect(const std::vector<Pt>& hull) {
  RotRect best{{0, 0}, 0, 0, {1, 0}, {0, 1}};
  double best_area = INFINITY;
  size_t n = hull.size();
  if (n == 1) {
    best.center = hull[0];
    return best;
  }
  for (size_t i = 0; i < n; ++i) {
    const Pt& a = hull[i];
    const Pt& b = hull[(i + 1) % n];
    double dx = b[0] - a[0], dy = b[1] - a[1], len = std::hypot(dx, dy);
    if (len == 0) continue;
    Pt u{dx / len, dy / len}, v{-u[1], u[0]};
    double umin = INFINITY, umax = -INFINITY, vmin = INFINITY, vmax = -INFINITY;
    for (const Pt& p : hull) {
      double pu = p[0] * u[0] + p[1] * u[1], pv = p[0] * v[0] + p[1] * v[1];
      umin = std::min(umin, pu);
      umax = std::max(umax, pu);
      vmin = std::min(vmin, pv);
      vmax = std::max(vmax, pv);
    }
    double area = (umax - umin) * (vmax - vmin);
    if (area < best_area) {
      best_area = area;
      double cu = (umin + umax) / 2, cv = (vmin + vmax) / 2;
      best.center = {cu * u[0] + cv * v[0], cu * u[1] + cv * v[1]};
      best.w = umax - umin;
      best.h = vmax - vmin;
      best.u = u;
      best.v = v;
    }
  }
  return best;
}

// Corners ordered clockwise from the top-left (PaddleOCR's get_mini_boxes order).
std::array<Pt, 4> corners(const RotRect& r) {
  std::array<Pt, 4> c;
  int k = 0;
  for (int su : {-1, 1})
    for (int sv : {-1, 1})
      c[k++] = {r.center[0] + su * r.w / 2 * r.u[0] + sv * r.h / 2 * r.v[0],
                r.center[1] + su * r.w / 2 * r.u[1] + sv * r.h / 2 * r.v[1]};
  std::sort(c.begin(), c.end(), [](const Pt& a, const Pt& b) { return a[0] < b[0]; });
  Pt tl, bl, tr, br;
  if (c[1][1] > c[0][1]) {
    tl = c[0];
    bl = c[1];
  } else {
    tl = c[1];
    bl = c[0];
  }
  if (c[3][1] > c[2][1]) {
    tr = c[2];
    br = c[3];
  } else {
    tr = c[3];
    br = c[2];
  }
  return {tl, tr, br, bl};
}

bool inside(const std::array<Pt, 4>& q, double x, double y) {
  for (int i = 0; i < 4; ++i) {
    const Pt& a = q[i];
    const Pt& b = q[(i + 1) % 4];
    if (cross(a, b, {x, y}) < 0) return false;
  }
  return true;
}

// Rotated crop: samples the quadrilateral's rectangle with bilinear interpolation, edges
// replicated (PaddleOCR's get_rotate_crop_image, which then turns tall crops upright).
Image crop_quad(const Image& img, const std::array<Pt, 4>& q) {
  double w = std::max(std::hypot(q[0][0] - q[1][0], q[0][1] - q[1][1]),
                      std::hypot(q[2][0] - q[3][0], q[2][1] - q[3][1]));
  double h = std::max(std::hypot(q[0][0] - q[3][0], q[0][1] - q[3][1]),
                      std::hypot(q[1][0] - q[2][0], q[1][1] - q[2][1]));
  int cw = std::max(1, static_cast<int>(w)), ch = std::max(1, static_cast<int>(h));
  // A tall crop is turned 90 degrees counter-clockwise as it is sampled: crop pixel (y, x)
  // lands at row cw - 1 - x, column y.
  const bool turn = ch >= 1.5 * cw;
  Image out;
  out.width = turn ? ch : cw;
  out.height = turn ? cw : ch;
  out.channels = 3;
  out.data.resize(static_cast<size_t>(cw) * ch * 3);
  // Affine map from crop (x, y) to image: tl + x * (tr - tl) / cw + y * (bl - tl) / ch.
  Pt ex{(q[1][0] - q[0][0]) / cw, (q[1][1] - q[0][1]) / cw};
  Pt ey{(q[3][0] - q[0][0]) / ch, (q[3][1] - q[0][1]) / ch};
  for (int y = 0; y < ch; ++y)
    for (int x = 0; x < cw; ++x) {
      double sx = q[0][0] + x * ex[0] + y * ey[0], sy = q[0][1] + x * ex[1] + y * ey[1];
      int x0 = static_cast<int>(std::floor(sx)), y0 = static_cast<int>(std::floor(sy));
      double fx = sx - x0, fy = sy - y0;
      const size_t at_out =
          turn ? static_cast<size_t>(cw - 1 - x) * ch + y : static_cast<size_t>(y) * cw + x;
      for (int c = 0; c < 3; ++c) {
        auto at = [&](int yy, int xx) {
          yy = std::clamp(yy, 0, img.height - 1);
          xx = std::clamp(xx, 0, img.width - 1);
          return static_cast<double>(img.data[(static_cast<size_t>(yy) * img.width + xx) * 3 + c]);
        };
        double v = (1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x0 + 1)) +
                   fy * ((1 - fx) * at(y0 + 1, x0) + fx * at(y0 + 1, x0 + 1));
        out.data[at_out * 3 + c] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  return out;
}

std::vector<uint32_t> utf8_codepoints(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += len;
  }
  return out;
}

}  // namespace

Result<PaddleOcr> PaddleOcr::load(const std::string& det_path, const std::string& rec_path,
                                  const std::string& keys_path, const LoadOptions& options) {
  PaddleOcr ocr;
  if (!det_path.empty()) {
    POWER_ASSIGN_OR_RETURN(ocr.det_, Model::load_file(det_path, options));
    if (ocr.det_->graph().inputs.size() != 1 || ocr.det_->graph().outputs.size() != 1) {
      return make_error(StatusCode::kInvalidArgument,
                        "detection model must have one input and one output");
    }
  }
  POWER_ASSIGN_OR_RETURN(ocr.rec_, Model::load_file(rec_path, options));
  ocr.rec_path_ = rec_path;
  if (ocr.rec_->graph().inputs.size() != 1 || ocr.rec_->graph().outputs.size() != 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "recognition model must have one input and one output");
  }
  POWER_ASSIGN_OR_RETURN(std::string keys, read_file_text(keys_path));
  size_t pos = 0;
  while (pos < keys.size()) {
    size_t nl = keys.find('\n', pos);
    if (nl == std::string::npos) nl = keys.size();
    std::string line = keys.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ocr.keys_.push_back(line);
    pos = nl + 1;
  }
  if (ocr.keys_.empty())
    return make_error(StatusCode::kInvalidArgument, "character list {} is empty", keys_path);
  ocr.keys_.push_back(" ");  // use_space_char: the last class
  return ocr;
}

namespace {

// The recognizer's input value of each byte v, (v / 255 - 0.5) / 0.5, computed once (RGB
// channel k goes to BGR plane 2 - k).
const std::array<float, 256>& rec_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v)
      t[static_cast<size_t>(v)] = (static_cast<float>(v) / 255.0f - 0.5f) / 0.5f;
    return t;
  }();
  return table;
}

}  // namespace

Result<OcrLine> PaddleOcr::recognize_h48(const Image& img, ThreadPool* pool) const {
  if (img.height != 48 || img.channels != 3) {
    return make_error(StatusCode::kInvalidArgument, "recognizer input must be RGB, 48 px high");
  }
  const int W = img.width;
  POWER_ASSIGN_OR_RETURN(Tensor x, make_tensor_uninit(DType::kF32, {1, 3, 48, W}));
  float* px = x.mutable_data<float>();
  const std::array<float, 256>& value = rec_values();
  each_sample(img, [&](int y, int i, int k, uint8_t v) {
    px[(static_cast<size_t>(2 - k) * 48 + y) * W + i] = value[v];
  });
  return recognize_input(x, pool);
}

Result<OcrLine> PaddleOcr::recognize_input(const Tensor& x, ThreadPool* pool) const {
  POWER_ASSIGN_OR_RETURN(std::vector<OcrLine> lines, recognize_lines({&x}, nullptr, pool));
  return std::move(lines[0]);
}

Result<std::vector<OcrLine>> PaddleOcr::recognize_lines(const std::vector<const Tensor*>& inputs,
                                                        const Model* stacked,
                                                        ThreadPool* pool) const {
  const auto B = static_cast<int64_t>(inputs.size());
  if (B == 0) return std::vector<OcrLine>();
  const int64_t W = inputs[0]->shape[3];
  for (const Tensor* x : inputs) {
    if (x->dtype != DType::kF32 || x->rank() != 4 || x->shape[0] != 1 || x->shape[1] != 3 ||
        x->shape[2] != 48 || x->shape[3] != W) {
      return make_error(StatusCode::kInvalidArgument,
                        "stacked recognizer inputs must be [1, 3, 48, {}], got {}", W,
                        shape_str(x->shape));
    }
  }
  if (B > 1 && stacked == nullptr) {
    return make_error(StatusCode::kInvalidArgument, "{} lines need the stacked recognizer", B);
  }
  std::vector<Tensor> out;
  if (B == 1) {
    POWER_ASSIGN_OR_RETURN(out, rec_->run({*inputs[0]}, pool));
  } else {
    const size_t line = static_cast<size_t>(3 * 48 * W);
    POWER_ASSIGN_OR_RETURN(Tensor x, make_tensor_uninit(DType::kF32, {B, 3, 48, W}));
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(inputs[static_cast<size_t>(b)]->data<float>(), line,
                  x.mutable_data<float>() + static_cast<size_t>(b) * line);
    POWER_ASSIGN_OR_RETURN(out, stacked->run({x}, pool));
  }
  const Tensor& p = out[0];
  if (p.dtype != DType::kF32 || p.rank() != 3 || p.shape[0] != B) {
    return make_error(StatusCode::kInvalidArgument, "recognizer output has shape {}",
                      shape_str(p.shape));
  }
  const int64_t T = p.shape[1], C = p.shape[2];
  std::vector<OcrLine> lines;
  for (int64_t b = 0; b < B; ++b) {
    POWER_ASSIGN_OR_RETURN(OcrLine l, decode(p.data<float>() + b * T * C, T, C, W));
    lines.push_back(std::move(l));
  }
  return lines;
}

Result<OcrLine> PaddleOcr::decode(const float* scores, int64_t T, int64_t C, int64_t W) const {
  if (C != static_cast<int64_t>(keys_.size()) + 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "recognizer has {} classes but the character list {} (+ blank)", C,
                      keys_.size());
  }
  OcrLine line;
  int64_t prev = -1;
  double score = 0;
  int kept = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = scores + t * C;
    int64_t best = std::max_element(row, row + C) - row;
    if (best != 0 && best != prev) {
      line.text += keys_[static_cast<size_t>(best - 1)];
      score += row[best];
      kept++;
    }
    prev = best;
  }
  line.score = kept ? static_cast<float>(score / kept) : 0.0f;
  line.box = {{{0, 0}, {static_cast<float>(W), 0}, {static_cast<float>(W), 48}, {0, 48}}};
  return line;
}

Result<std::shared_ptr<const Model>> PaddleOcr::load_stacked_recognizer() const {
  LoadOptions lo;
  lo.batch_inputs = true;
  return Model::load_file(rec_path_, lo);
}

Result<Tensor> PaddleOcr::line_input(const Image& src) const {
  Image storage;
  const Image& img = as_rgb(src, storage);
  if (img.width <= 0 || img.height <= 0)
    return make_error(StatusCode::kInvalidArgument, "empty image");
  // PaddleOCR's resize_norm_img: height 48, width by aspect ratio; short lines are padded
  // (with the normalized value of 128, i.e. mid gray) to 320. The resized samples go straight
  // into the recognizer's input.
  int w = static_cast<int>(std::ceil(48.0 * img.width / img.height));
  w = std::clamp(w, 1, 48 * 64);
  const int W = std::max(w, 320);
  POWER_ASSIGN_OR_RETURN(Tensor x, make_tensor_uninit(DType::kF32, {1, 3, 48, W}));
  float* px = x.mutable_data<float>();
  const std::array<float, 256>& value = rec_values();
  if (w < W) {
    const float pad = value[128];
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 48; ++y)
        std::fill(px + (static_cast<size_t>(c) * 48 + y) * W + w,
                  px + (static_cast<size_t>(c) * 48 + y + 1) * W, pad);
  }
  resize_bilinear_each(img, w, 48, [&](int y, int i, int k, uint8_t v) {
    px[(static_cast<size_t>(2 - k) * 48 + y) * W + i] = value[v];
  });
  return x;
}

Result<OcrLine> PaddleOcr::recognize(const Image& src, ThreadPool* pool) const {
  POWER_ASSIGN_OR_RETURN(Tensor x, line_input(src));
  return recognize_input(x, pool);
}

Result<std::vector<OcrLine>> PaddleOcr::detect(const Image& src, const OcrOptions& opt,
                                               ThreadPool* pool) const {
  if (!det_) return make_error(StatusCode::kInvalidArgument, "no detection model loaded");
  Image storage;
  const Image& img = as_rgb(src, storage);
  int H = img.height, W = img.width;
  if (H <= 0 || W <= 0) return make_error(StatusCode::kInvalidArgument, "empty image");
  double ratio = std::max(H, W) > opt.det_limit_side
                     ? static_cast<double>(opt.det_limit_side) / std::max(H, W)
                     : 1.0;
  int rh = std::max(static_cast<int>(std::lround(H * ratio / 32.0)) * 32, 32);
  int rw = std::max(static_cast<int>(std::lround(W * ratio / 32.0)) * 32, 32);
  // The (resized) samples go straight into the detector's input: BGR planes, mean/std in that
  // order (as PaddleOCR); RGB channel k is plane 2 - k.
  // Each plane's value of every byte is computed once (the same float operations, so the same
  // bits): two divisions per sample were a tenth of a 480x640 page's detection time.
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  float table[3][256];
  for (int c = 0; c < 3; ++c)
    for (int b = 0; b < 256; ++b)
      table[c][b] = (static_cast<float>(b) / 255.0f - mean[c]) / stdv[c];
  POWER_ASSIGN_OR_RETURN(Tensor x, make_tensor_uninit(DType::kF32, {1, 3, rh, rw}));
  float* px = x.mutable_data<float>();
  auto put = [&](int y, int i, int k, uint8_t byte) {
    const int c = 2 - k;
    px[(static_cast<size_t>(c) * rh + y) * rw + i] = table[c][byte];
  };
  if (rh == H && rw == W) {
    each_sample(img, put);
  } else {
    resize_bilinear_each(img, rw, rh, put);
  }
  POWER_ASSIGN_OR_RETURN(auto out, det_->run({x}, pool));
  const Tensor& p = out[0];
  if (p.dtype != DType::kF32 || p.rank() != 4 || p.shape[0] != 1 || p.shape[1] != 1) {
    return make_error(StatusCode::kInvalidArgument, "detector output has shape {}",
                      shape_str(p.shape));
  }
  int ph = static_cast<int>(p.shape[2]), pw = static_cast<int>(p.shape[3]);
  const float* prob = p.data<float>();
  std::vector<uint8_t> bitmap(static_cast<size_t>(ph) * pw);
  for (size_t i = 0; i < bitmap.size(); ++i) bitmap[i] = prob[i] > opt.det_threshold;
  // 8-connected regions.
  std::vector<int> label(bitmap.size(), -1);
  std::vector<OcrLine> lines;
  std::vector<int> stack;
  // Per row, the region's leftmost and rightmost pixel: the hull of a region's pixels is the
  // hull of these (every other pixel lies between two of them on its row), so they are all the
  // hull is given (sorting every pixel was a tenth of the time outside the network).
  std::vector<int> row_lo(static_cast<size_t>(ph), pw), row_hi(static_cast<size_t>(ph), -1);
  int regions = 0;
  for (int y0 = 0; y0 < ph; ++y0)
    for (int x0 = 0; x0 < pw; ++x0) {
      size_t s = static_cast<size_t>(y0) * pw + x0;
      if (!bitmap[s] || label[s] >= 0) continue;
      if (++regions > 1000) break;  // max_candidates
      stack.assign(1, static_cast<int>(s));
      label[s] = regions;
      int top = y0, bottom = y0;
      while (!stack.empty()) {
        int cur = stack.back();
        stack.pop_back();
        int cy = cur / pw, cx = cur % pw;
        row_lo[static_cast<size_t>(cy)] = std::min(row_lo[static_cast<size_t>(cy)], cx);
        row_hi[static_cast<size_t>(cy)] = std::max(row_hi[static_cast<size_t>(cy)], cx);
        top = std::min(top, cy);
        bottom = std::max(bottom, cy);
        for (int dy = -1; dy <= 1; ++dy)
          for (int dx = -1; dx <= 1; ++dx) {
            int ny = cy + dy, nx = cx + dx;
            if (ny < 0 || ny >= ph || nx < 0 || nx >= pw) continue;
            size_t ns = static_cast<size_t>(ny) * pw + nx;
            if (bitmap[ns] && label[ns] < 0) {
              label[ns] = regions;
              stack.push_back(static_cast<int>(ns));
            }
          }
      }
      // Pixel positions (as contour points are).
      std::vector<Pt> pts;
      for (int y = top; y <= bottom; ++y) {
        int& lo = row_lo[static_cast<size_t>(y)];
        int& hi = row_hi[static_cast<size_t>(y)];
        if (hi < 0) continue;
        pts.push_back({static_cast<double>(lo), static_cast<double>(y)});
        if (hi != lo) pts.push_back({static_cast<double>(hi), static_cast<double>(y)});
        lo = pw;
        hi = -1;
      }
      RotRect rr = min_area_rect(convex_hull(pts));
      if (std::min(rr.w, rr.h) < 3) continue;  // min_size
      auto quad = corners(rr);
      // box_score_fast: mean probability over the box.
      double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
      for (const auto& c : quad) {
        xmin = std::min(xmin, c[0]);
        xmax = std::max(xmax, c[0]);
        ymin = std::min(ymin, c[1]);
        ymax = std::max(ymax, c[1]);
      }
      double sum = 0;
      int cnt = 0;
      for (int yy = std::max(0, static_cast<int>(std::floor(ymin)));
           yy <= std::min(ph - 1, static_cast<int>(std::ceil(ymax))); ++yy)
        for (int xx = std::max(0, static_cast<int>(std::floor(xmin)));
             xx <= std::min(pw - 1, static_cast<int>(std::ceil(xmax))); ++xx)
          if (inside(quad, xx, yy)) {
            sum += prob[static_cast<size_t>(yy) * pw + xx];
            cnt++;
          }
      double score = cnt ? sum / cnt : 0;
      if (score < opt.box_threshold) continue;
      // Unclip: offset by area * ratio / perimeter on every side.
      double d = rr.w * rr.h * opt.unclip_ratio / (2 * (rr.w + rr.h));
      rr.w += 2 * d;
      rr.h += 2 * d;
      if (std::min(rr.w, rr.h) < 5) continue;
      quad = corners(rr);
      OcrLine line;
      line.score = static_cast<float>(score);
      for (int k = 0; k < 4; ++k) {
        line.box[k][0] = static_cast<float>(
            std::clamp(std::round(quad[k][0] * W / pw), 0.0, static_cast<double>(W)));
        line.box[k][1] = static_cast<float>(
            std::clamp(std::round(quad[k][1] * H / ph), 0.0, static_cast<double>(H)));
      }
      lines.push_back(line);
    }
  // Top to bottom, then left to right when two boxes' tops are within 10 px.
  std::sort(lines.begin(), lines.end(), [](const OcrLine& a, const OcrLine& b) {
    return a.box[0][1] != b.box[0][1] ? a.box[0][1] < b.box[0][1] : a.box[0][0] < b.box[0][0];
  });
  for (size_t i = 0; i + 1 < lines.size(); ++i)
    for (size_t j = i + 1; j-- > 0;) {
      if (std::fabs(lines[j + 1].box[0][1] - lines[j].box[0][1]) < 10 &&
          lines[j + 1].box[0][0] < lines[j].box[0][0]) {
        std::swap(lines[j], lines[j + 1]);
      } else {
        break;
      }
    }
  return lines;
}

Result<Tensor> PaddleOcr::box_input(const Image& rgb,
                                    const std::array<std::array<float, 2>, 4>& box) const {
  if (rgb.channels != 3) return make_error(StatusCode::kInvalidArgument, "box_input needs RGB");
  std::array<Pt, 4> q;
  for (int k = 0; k < 4; ++k) q[k] = {box[k][0], box[k][1]};
  return line_input(crop_quad(rgb, q));
}

Result<std::vector<OcrLine>> PaddleOcr::run(const Image& src, const OcrOptions& opt,
                                            ThreadPool* pool) const {
  // Between the stages nothing is copied but the crops: the detector's input is written from
  // the image, its probability map is read where the graph left it, and each crop is resized
  // straight into the recognizer's input.
  Image storage;
  const Image& img = as_rgb(src, storage);
  POWER_ASSIGN_OR_RETURN(auto boxes, detect(img, opt, pool));
  std::vector<OcrLine> out;
  for (const auto& b : boxes) {
    POWER_ASSIGN_OR_RETURN(Tensor x, box_input(img, b.box));
    POWER_ASSIGN_OR_RETURN(OcrLine line, recognize_input(x, pool));
    if (!keep(line, opt)) continue;
    line.box = b.box;
    out.push_back(std::move(line));
  }
  return out;
}

double character_error_rate(const std::string& hyp, const std::string& ref) {
  auto h = utf8_codepoints(hyp), r = utf8_codepoints(ref);
  if (r.empty()) return h.empty() ? 0.0 : 1.0;
  std::vector<size_t> prev(h.size() + 1), cur(h.size() + 1);
  for (size_t j = 0; j <= h.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= r.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= h.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r[i - 1] == h[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return static_cast<double>(prev[h.size()]) / static_cast<double>(r.size());
}

}  // namespace power::onnx
