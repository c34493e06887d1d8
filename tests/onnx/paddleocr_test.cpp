// PaddleOCR PP-OCRv4: the recognizer against onnxruntime's text for a line crop, and the full
// detection + recognition pipeline against tesseract's gold text for phototest.tif.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "base/thread_pool.h"
#include "onnx/media.h"
#include "onnx/models/paddleocr.h"
#include "onnx_test_util.h"

namespace power::onnx {
namespace {

using power::testing::ocr_asset;
using power::testing::shared_dir;

std::string normalize_lines(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    size_t b = line.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    if (!out.empty()) out += '\n';
    out += line.substr(b);
  }
  return out;
}

// The detection + recognition pipeline (PP-OCRv4 det and rec) and phototest.tif, as RGB.
class OnnxPaddleOcrPage : public ::testing::Test {
 protected:
  void SetUp() override {
    POWER_REQUIRE_SHARED();
    POWER_REQUIRE_NPM_MODEL(ocr_asset("ch_PP-OCRv4_det_infer.onnx"));
    auto o =
        PaddleOcr::load(ocr_asset("ch_PP-OCRv4_det_infer.onnx"),
                        ocr_asset("ch_PP-OCRv4_rec_infer.onnx"), ocr_asset("ppocr_keys_v1.txt"));
    ASSERT_TRUE(o.ok()) << o.status().to_string();
    ocr.emplace(std::move(*o));
    auto i = load_image(shared_dir() + "/models/ocr/phototest.tif", 3);
    ASSERT_TRUE(i.ok()) << i.status().to_string();
    img.emplace(std::move(*i));
  }
  std::optional<PaddleOcr> ocr;
  std::optional<Image> img;
};

// tesseract's gold text for phototest.tif, lines trimmed.
std::string phototest_gold() {
  std::ifstream f(shared_dir() + "/models/ocr/phototest.txt");
  std::stringstream gold;
  gold << f.rdbuf();
  return normalize_lines(gold.str());
}

TEST(OnnxPaddleOcr, RecognizerReadsLineOneExactly) {
  POWER_REQUIRE_SHARED();
  POWER_REQUIRE_NPM_MODEL(ocr_asset("ch_PP-OCRv4_rec_infer.onnx"));
  auto ocr =
      PaddleOcr::load("", ocr_asset("ch_PP-OCRv4_rec_infer.onnx"), ocr_asset("ppocr_keys_v1.txt"));
  ASSERT_TRUE(ocr.ok()) << ocr.status().to_string();
  auto img = load_image(shared_dir() + "/models/ocr/phototest_line1_h48.ppm", 3);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  ASSERT_EQ(img->height, 48);
  ASSERT_EQ(img->width, 697);
  auto line = ocr->recognize_h48(*img);
  ASSERT_TRUE(line.ok()) << line.status().to_string();
  std::ifstream f(shared_dir() + "/models/ocr/expected_rec_phototest_line1_ort1.30.0.json");
  auto want = nlohmann::json::parse(f);
  EXPECT_EQ(line->text, want["text"].get<std::string>());
  EXPECT_EQ(line->text, "This is a lot of 12 point text to test the");
}

TEST_F(OnnxPaddleOcrPage, PipelineOnPhototestWithinThreePercentCer) {
  auto lines = ocr->run(*img);
  ASSERT_TRUE(lines.ok()) << lines.status().to_string();
  std::string text;
  for (const auto& l : *lines) text += l.text + "\n";
  std::string hyp = normalize_lines(text), ref = phototest_gold();
  double cer = character_error_rate(hyp, ref);
  std::printf("paddleocr phototest.tif: %zu lines, CER %.4f\n---\n%s\n---\n", lines->size(), cer,
              hyp.c_str());
  EXPECT_LE(cer, 0.03);
  EXPECT_EQ(lines->size(), 8u);
}

// The page turned a quarter clockwise: every line's box is tall, and its crop must be turned
// upright (counter-clockwise) as it is sampled for the recognizer to read it. The detector finds
// fewer lines on a turned page, so the check is on what it finds: at least five lines, every box
// tall, and every text (trimmed) a piece of tesseract's gold text with its lines joined.
TEST_F(OnnxPaddleOcrPage, TallLinesAreTurnedUpright) {
  Image turned;
  turned.width = img->height;
  turned.height = img->width;
  turned.channels = 3;
  turned.data.resize(img->data.size());
  for (int y = 0; y < img->height; ++y)
    for (int x = 0; x < img->width; ++x)
      for (int c = 0; c < 3; ++c)
        turned.data[(static_cast<size_t>(x) * turned.width + (img->height - 1 - y)) * 3 + c] =
            img->data[(static_cast<size_t>(y) * img->width + x) * 3 + c];
  auto lines = ocr->run(turned);
  ASSERT_TRUE(lines.ok()) << lines.status().to_string();
  std::string ref = phototest_gold();
  std::replace(ref.begin(), ref.end(), '\n', ' ');
  EXPECT_GE(lines->size(), 5u);
  for (const auto& l : *lines) {
    const float w = l.box[1][0] - l.box[0][0], h = l.box[3][1] - l.box[0][1];
    EXPECT_GE(std::fabs(h), 1.5f * std::fabs(w)) << l.text;
    const std::string text = normalize_lines(l.text);
    EXPECT_GE(text.size(), 10u) << text;
    EXPECT_NE(ref.find(text), std::string::npos) << "'" << text << "' is not in the gold text";
  }
}

// Stacked recognizer runs (the server's OCR microbatching, service.h): lines of one width run as
// one [B, 3, 48, W] batch on the recognizer loaded for stacked inputs, and each must get the text
// and score bits it gets alone. The lines: pieces of phototest.tif's lines 4 heights wide (so
// narrower than 320 px at height 48: all padded to W = 320), stacked 2 to 16 at a time with
// the members changing from size to size; and each whole line stacked with its own mirror image
// (the same width, other content). One and two threads. The class scores of the widest batch
// are compared too, not only the decoded text.
TEST_F(OnnxPaddleOcrPage, StackedLinesGetTheirSoloBits) {
  auto stacked = ocr->load_stacked_recognizer();
  ASSERT_TRUE(stacked.ok()) << stacked.status().to_string();
  auto boxes = ocr->detect(*img);
  ASSERT_TRUE(boxes.ok()) << boxes.status().to_string();
  ASSERT_EQ(boxes->size(), 8u);
  std::vector<Tensor> pieces, whole;
  for (const auto& b : *boxes) {
    float x0 = b.box[0][0], x1 = b.box[0][0], y0 = b.box[0][1], y1 = b.box[0][1];
    for (const auto& p : b.box) {
      x0 = std::min(x0, p[0]);
      x1 = std::max(x1, p[0]);
      y0 = std::min(y0, p[1]);
      y1 = std::max(y1, p[1]);
    }
    const float h = y1 - y0;
    for (float x = x0; x + 4 * h <= x1 && pieces.size() < 16; x += 4 * h) {
      auto t = ocr->box_input(*img, {{{x, y0}, {x + 4 * h, y0}, {x + 4 * h, y1}, {x, y1}}});
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      ASSERT_EQ(t->shape[3], 320);
      pieces.push_back(std::move(*t));
    }
    auto t = ocr->box_input(*img, b.box);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_GT(t->shape[3], 320);
    whole.push_back(std::move(*t));
  }
  ASSERT_EQ(pieces.size(), 16u);
  ThreadPool two(2);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
    std::map<const Tensor*, OcrLine> alone;
    auto solo = [&](const Tensor& x) {
      if (auto it = alone.find(&x); it != alone.end()) return it->second;
      auto r = ocr->recognize_lines({&x}, nullptr, pool);
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      return alone[&x] = r.ok() ? (*r)[0] : OcrLine{};
    };
    auto expect_solo_bits = [&](const std::vector<const Tensor*>& batch) {
      auto rs = ocr->recognize_lines(batch, stacked->get(), pool);
      ASSERT_TRUE(rs.ok()) << rs.status().to_string();
      ASSERT_EQ(rs->size(), batch.size());
      for (size_t i = 0; i < batch.size(); ++i) {
        const OcrLine want = solo(*batch[i]);
        EXPECT_EQ((*rs)[i].text, want.text) << "batch of " << batch.size() << ", line " << i;
        EXPECT_EQ(std::memcmp(&(*rs)[i].score, &want.score, sizeof(float)), 0)
            << "batch of " << batch.size() << ", line " << i << ": " << (*rs)[i].score << " vs "
            << want.score;
      }
    };
    std::set<std::string> texts;
    for (size_t b = 2; b <= pieces.size(); ++b) {
      std::vector<const Tensor*> batch;
      for (size_t i = 0; i < b; ++i) batch.push_back(&pieces[(b * 3 + i) % pieces.size()]);
      expect_solo_bits(batch);
    }
    for (const Tensor& p : pieces) texts.insert(solo(p).text);
    EXPECT_GE(texts.size(), 12u);  // the pieces read differently
    for (const Tensor& x : whole) {
      const int64_t W = x.shape[3];
      auto mirror = make_tensor_uninit(DType::kF32, x.shape);
      ASSERT_TRUE(mirror.ok());
      for (int64_t r = 0; r < 3 * 48; ++r)
        for (int64_t i = 0; i < W; ++i)
          mirror->mutable_data<float>()[r * W + i] = x.data<float>()[r * W + W - 1 - i];
      expect_solo_bits({&x, &*mirror});
      alone.erase(&*mirror);  // the next mirror may get the same address
    }
  }
  // The class scores themselves: all 16 pieces stacked against each piece alone.
  std::vector<float> all;
  for (const Tensor& p : pieces)
    all.insert(all.end(), p.data<float>(), p.data<float>() + p.numel());
  auto out = (*stacked)->run({make_f32({16, 3, 48, 320}, std::move(all))});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (size_t i = 0; i < pieces.size(); ++i) {
    auto one = ocr->rec_model().run({pieces[i]});
    ASSERT_TRUE(one.ok());
    const int64_t per = (*one)[0].numel();
    ASSERT_EQ((*out)[0].numel(), per * 16);
    EXPECT_EQ(std::memcmp((*out)[0].data<float>() + static_cast<int64_t>(i) * per,
                          (*one)[0].data<float>(), static_cast<size_t>(per) * sizeof(float)),
              0)
        << "piece " << i;
  }
}

TEST(OnnxPaddleOcr, CharacterErrorRateArithmetic) {
  EXPECT_DOUBLE_EQ(character_error_rate("abc", "abc"), 0.0);
  EXPECT_DOUBLE_EQ(character_error_rate("abd", "abc"), 1.0 / 3);  // one substitution
  EXPECT_DOUBLE_EQ(character_error_rate("ab", "abcd"), 2.0 / 4);  // two deletions
  EXPECT_DOUBLE_EQ(character_error_rate("é", "e"), 1.0);          // code points, not bytes
}

}  // namespace
}  // namespace power::onnx
