// The ONNX commands through the `power` binary: classify, vad, ocr, onnx inspect/run.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "onnx_test_util.h"
#include "run_util.h"

namespace {

using nlohmann::json;
using power::testing::ocr_asset;
using power::testing::run_power;
using power::testing::shared_dir;

TEST(CliOnnx, ClassifyMnistJson) {
  POWER_REQUIRE_SHARED();
  std::string v = shared_dir() + "/models/vision/";
  auto r = run_power({"classify", "-m", v + "mnist-8.onnx", v + "mnist_nine.bmp", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json::parse(r.out);
  EXPECT_EQ(j["class"], 9);
  std::ifstream f(v + "expected_mnist-8_mnist_nine_ort1.30.0.json");
  auto want = json::parse(f);
  ASSERT_EQ(j["scores"].size(), 10u);
  for (int i = 0; i < 10; ++i) {
    double w = want["logits"][i];
    EXPECT_NEAR(j["scores"][i].get<double>(), w, 1e-3 * std::fabs(w));
  }
  auto plain = run_power({"classify", "-m", v + "mnist-8.onnx", v + "mnist_nine.bmp"});
  EXPECT_EQ(plain.out, "9\n");
}

TEST(CliOnnx, InspectPrintsPlannedPeak) {
  POWER_REQUIRE_SHARED();
  auto r = run_power({"onnx", "inspect", shared_dir() + "/models/vision/mnist-8.onnx", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json::parse(r.out);
  EXPECT_EQ(j["opset"], 8);
  // conv1's 8x28x28 output (its bias Add and Relu fused in) beside the 8x14x14 MaxPool output.
  EXPECT_EQ(j["plan"]["peak_bytes"], 8 * 28 * 28 * 4 + 8 * 14 * 14 * 4);
  EXPECT_EQ(j["operators"]["Conv"], 2);
}

// MNIST's Conv -> Add [8,1,1] -> Relu, twice: the Add and Relu run as the Conv's epilogue,
// unless --no-fuse keeps them apart.
TEST(CliOnnx, InspectShowsFusedNodes) {
  POWER_REQUIRE_SHARED();
  const std::string model = shared_dir() + "/models/vision/mnist-8.onnx";
  auto fused = run_power({"onnx", "inspect", model, "--json"});
  auto plain = run_power({"onnx", "inspect", model, "--json", "--no-fuse"});
  ASSERT_EQ(fused.exit_code, 0) << fused.err;
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto f = json::parse(fused.out), p = json::parse(plain.out);
  EXPECT_EQ(f["fused"]["Add"], 2);
  EXPECT_EQ(f["fused"]["Relu"], 2);
  EXPECT_FALSE(f["operators"].contains("Relu"));
  EXPECT_EQ(f["operators"]["Add"], 1);  // the bias after the MatMul is no Conv's
  // 12 nodes; the Reshape of the last MatMul's weights (an initializer, to a constant shape)
  // is folded at load, and the fused Adds and Relus are in their Convs.
  EXPECT_EQ(f["folded"], 1);
  EXPECT_EQ(f["operators"].count("Reshape"), 1u);  // the one of the input, which is no constant
  EXPECT_EQ(f["nodes"], 7);
  EXPECT_TRUE(p["fused"].empty());
  EXPECT_EQ(p["operators"]["Relu"], 2);
  EXPECT_EQ(p["nodes"], 11);
  auto unfolded = run_power({"onnx", "inspect", model, "--json", "--no-fold"});
  ASSERT_EQ(unfolded.exit_code, 0) << unfolded.err;
  auto u = json::parse(unfolded.out);
  EXPECT_EQ(u["folded"], 0);
  EXPECT_EQ(u["operators"]["Reshape"], 2);
  EXPECT_EQ(u["nodes"], 8);
  // Unfused, an elementwise node's input and output (two 8x28x28 maps) are live at once.
  EXPECT_EQ(p["plan"]["peak_bytes"], 2 * 8 * 28 * 28 * 4);
  EXPECT_EQ(f["plan"]["peak_bytes"], 8 * 28 * 28 * 4 + 8 * 14 * 14 * 4);
  auto text = run_power({"onnx", "inspect", model});
  EXPECT_NE(text.out.find("fused into Conv/ConvTranspose: Add 2 Relu 2"), std::string::npos)
      << text.out;
}

TEST(CliOnnx, BadInputsAreCleanErrors) {
  POWER_REQUIRE_SHARED();
  std::string v = shared_dir() + "/models/vision/";
  // An image that is not 28x28, a non-model, a missing file.
  auto r = run_power({"classify", "-m", v + "mnist-8.onnx", v + "cat.bmp"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("28x28"), std::string::npos) << r.err;
  auto r2 = run_power({"classify", "-m", v + "mnist_nine.bmp", v + "mnist_nine.bmp"});
  EXPECT_EQ(r2.exit_code, 1);
  EXPECT_NE(r2.err.find("ONNX"), std::string::npos) << r2.err;
  auto r3 = run_power({"vad", "-m", v + "mnist-8.onnx", shared_dir() + "/models/audio/jfk.wav"});
  EXPECT_EQ(r3.exit_code, 1);
  EXPECT_NE(r3.err.find("Silero"), std::string::npos) << r3.err;
}

// `power serve --onnx-max-batch` and `--onnx-ocr-max-batch` (docs/SERVER.md "ONNX models")
// take 1 to 1024 and `--onnx-batch-wait-us` 0 to 1,000,000; the batching itself is checked over
// HTTP in onnx_http_test.
TEST(CliOnnx, ServeMaxBatchFlagIsChecked) {
  auto help = run_power({"serve", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--onnx-max-batch"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--onnx-batch-wait-us"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--onnx-ocr-max-batch"), std::string::npos) << help.out;
  for (const char* flag : {"--onnx-max-batch", "--onnx-ocr-max-batch"}) {
    for (const char* bad : {"0", "1025", "many"}) {
      auto r = run_power({"serve", flag, bad});
      EXPECT_NE(r.exit_code, 0) << flag << " " << bad;
      EXPECT_NE((r.err + r.out).find(flag), std::string::npos) << r.err << r.out;
    }
  }
  for (const char* bad : {"-1", "1000001", "soon"}) {
    auto r = run_power({"serve", "--onnx-batch-wait-us", bad});
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE((r.err + r.out).find("--onnx-batch-wait-us"), std::string::npos) << r.err << r.out;
  }
}

TEST(CliOnnx, VadJsonSegments) {
  POWER_REQUIRE_SHARED();
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  std::string a = shared_dir() + "/models/audio/";
  auto r = run_power({"vad", "-m", power::testing::silero_model(), a + "test.wav", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json::parse(r.out);
  std::ifstream f(a + "expected_onnx_speech_timestamps.json");
  auto want = json::parse(f)["snapshots"][0]["speech_timestamps"];
  ASSERT_EQ(j["segments"].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(j["segments"][i]["start"].get<double>(), want[i]["start"].get<double>());
    EXPECT_EQ(j["segments"][i]["end"].get<double>(), want[i]["end"].get<double>());
  }
  EXPECT_EQ(j["probs"].size(), 1875u);
}

TEST(CliOnnx, OcrLineAndPage) {
  POWER_REQUIRE_SHARED();
  POWER_REQUIRE_NPM_MODEL(ocr_asset("ch_PP-OCRv4_det_infer.onnx"));
  std::string o = shared_dir() + "/models/ocr/";
  auto r = run_power({"ocr", "--line", "--rec", ocr_asset("ch_PP-OCRv4_rec_infer.onnx"), "--keys",
                      ocr_asset("ppocr_keys_v1.txt"), o + "phototest_line1_h48.ppm"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "This is a lot of 12 point text to test the\n");
  auto p = run_power({"ocr", "--det", ocr_asset("ch_PP-OCRv4_det_infer.onnx"), "--rec",
                      ocr_asset("ch_PP-OCRv4_rec_infer.onnx"), "--keys",
                      ocr_asset("ppocr_keys_v1.txt"), o + "phototest.tif", "--json", "-t", "2"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  auto j = json::parse(p.out);
  ASSERT_EQ(j["lines"].size(), 8u);
  EXPECT_EQ(j["lines"][0]["text"], "This is a lot of 12 point text to test the");
  EXPECT_EQ(j["lines"][0]["box"].size(), 4u);
  EXPECT_GT(j["lines"][0]["score"].get<double>(), 0.5);
}

// --receipt: a signed power.receipt.v1 that `power verify` accepts against the model file,
// the input file and the printed JSON, and rejects for another input. $POWER_HOME is a fresh
// directory (the key is made there); the npm model path is resolved before it changes.
TEST(CliOnnx, ReceiptsVerify) {
  POWER_REQUIRE_SHARED();
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  const std::string silero = power::testing::silero_model();
  const std::string v = shared_dir() + "/models/vision/", a = shared_dir() + "/models/audio/";
  const auto dir =
      std::filesystem::temp_directory_path() / ("power-cli-onnx-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ::setenv("POWER_HOME", (dir / "home").c_str(), 1);
  auto write = [](const std::filesystem::path& p, const std::string& text) {
    std::ofstream(p) << text;
  };
  auto c = run_power({"classify", "-m", v + "mnist-8.onnx", v + "mnist_nine.bmp", "--json",
                      "--receipt", (dir / "c.json").string()});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(json::parse(c.out)["class"], 9);
  write(dir / "c_out.json", c.out);
  auto ok = run_power({"verify", (dir / "c.json").string(), "-m", v + "mnist-8.onnx", "--request",
                       v + "mnist_nine.bmp", "--output", (dir / "c_out.json").string()});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("PASS signature"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("PASS model"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("receipt accepted"), std::string::npos) << ok.out;
  auto bad = run_power({"verify", (dir / "c.json").string(), "--request", v + "cat.bmp"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find("FAIL input"), std::string::npos) << bad.out;

  auto vr = run_power(
      {"vad", "-m", silero, a + "jfk.wav", "--json", "--receipt", (dir / "v.json").string()});
  ASSERT_EQ(vr.exit_code, 0) << vr.err;
  write(dir / "v_out.json", vr.out);
  auto plain = run_power({"vad", "-m", silero, a + "jfk.wav", "--json"});
  EXPECT_EQ(plain.out, vr.out);  // the receipt path prints the same answer
  auto vok = run_power({"verify", (dir / "v.json").string(), "-m", silero, "--request",
                        a + "jfk.wav", "--output", (dir / "v_out.json").string()});
  EXPECT_EQ(vok.exit_code, 0) << vok.out << vok.err;
  auto wrong_model = run_power({"verify", (dir / "v.json").string(), "-m", v + "mnist-8.onnx"});
  EXPECT_EQ(wrong_model.exit_code, 1);
  EXPECT_NE(wrong_model.out.find("FAIL model"), std::string::npos) << wrong_model.out;
  ::unsetenv("POWER_HOME");
  std::filesystem::remove_all(dir);
}

}  // namespace
