// PaddleOCR PP-OCRv4: the recognizer against onnxruntime's text for a line crop, and the full
// detection + recognition pipeline against tesseract's gold text for phototest.tif.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

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

TEST(OnnxPaddleOcr, CharacterErrorRateArithmetic) {
  EXPECT_DOUBLE_EQ(character_error_rate("abc", "abc"), 0.0);
  EXPECT_DOUBLE_EQ(character_error_rate("abd", "abc"), 1.0 / 3);  // one substitution
  EXPECT_DOUBLE_EQ(character_error_rate("ab", "abcd"), 2.0 / 4);  // two deletions
  EXPECT_DOUBLE_EQ(character_error_rate("é", "e"), 1.0);          // code points, not bytes
}

}  // namespace
}  // namespace power::onnx
