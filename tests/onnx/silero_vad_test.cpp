// Silero VAD v6.2 (silero_vad_16k_op15.onnx, uses If) against onnxruntime's per-window
// probabilities and Silero's own get_speech_timestamps segments (../shared/models/audio).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "onnx/media.h"
#include "onnx/models/silero_vad.h"
#include "onnx_test_util.h"

namespace power::onnx {
namespace {

using power::testing::shared_dir;

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

void check_probs(const std::string& wav, const std::string& expected_json) {
  auto vad = SileroVad::load(power::testing::silero_model());
  ASSERT_TRUE(vad.ok()) << vad.status().to_string();
  auto audio = load_audio(shared_dir() + "/models/audio/" + wav);
  ASSERT_TRUE(audio.ok()) << audio.status().to_string();
  ASSERT_EQ(audio->sample_rate, 16000);
  auto probs = vad->probabilities(audio->samples, audio->sample_rate);
  ASSERT_TRUE(probs.ok()) << probs.status().to_string();
  auto want = read_json(shared_dir() + "/models/audio/" + expected_json);
  ASSERT_EQ(probs->size(), want["probs"].size());
  ASSERT_EQ(probs->size(), want["n"].get<size_t>());
  double worst = 0;
  for (size_t i = 0; i < probs->size(); ++i) {
    double d = std::fabs((*probs)[i] - want["probs"][i].get<double>());
    worst = std::max(worst, d);
    EXPECT_LE(d, 1e-4) << "window " << i;
  }
  std::printf("silero %s: %zu windows, max |diff| vs onnxruntime %.2e\n", wav.c_str(),
              probs->size(), worst);
}

TEST(OnnxSileroVad, JfkProbabilitiesMatchOnnxruntime) {
  POWER_REQUIRE_SHARED();
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  check_probs("jfk.wav", "expected_probs_silero_vad_16k_op15_jfk.json");
}

TEST(OnnxSileroVad, TestWavProbabilitiesMatchOnnxruntime) {
  POWER_REQUIRE_SHARED();
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  check_probs("test.wav", "expected_probs_silero_vad_16k_op15_test.json");
}

// Segmentation alone, from onnxruntime's probabilities: must reproduce Silero's timestamps.
TEST(OnnxSileroVad, SegmentsFromReferenceProbsMatchSilero) {
  POWER_REQUIRE_SHARED();
  std::string dir = shared_dir() + "/models/audio/";
  auto want = read_json(dir + "expected_probs_silero_vad_16k_op15_test.json");
  std::vector<float> probs;
  for (const auto& p : want["probs"]) probs.push_back(p.get<float>());
  auto audio = load_audio(dir + "test.wav");
  ASSERT_TRUE(audio.ok());
  auto segs = speech_segments(probs, static_cast<int64_t>(audio->samples.size()), 16000);
  auto ts = read_json(dir + "expected_onnx_speech_timestamps.json")["snapshots"][0];
  ASSERT_EQ(ts["file"], "test.wav");
  const auto& ref = ts["speech_timestamps"];
  ASSERT_EQ(segs.size(), ref.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    EXPECT_EQ(samples_to_seconds(segs[i].start, 16000), ref[i]["start"].get<double>()) << i;
    EXPECT_EQ(samples_to_seconds(segs[i].end, 16000), ref[i]["end"].get<double>()) << i;
  }
}

// End to end: our probabilities, our segmentation, Silero's timestamps.
TEST(OnnxSileroVad, TestWavSegmentsMatchSilero) {
  POWER_REQUIRE_SHARED();
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  std::string dir = shared_dir() + "/models/audio/";
  auto vad = SileroVad::load(power::testing::silero_model());
  ASSERT_TRUE(vad.ok());
  auto audio = load_audio(dir + "test.wav");
  ASSERT_TRUE(audio.ok());
  auto probs = vad->probabilities(audio->samples, 16000);
  ASSERT_TRUE(probs.ok());
  auto segs = speech_segments(*probs, static_cast<int64_t>(audio->samples.size()), 16000);
  auto ts = read_json(dir + "expected_onnx_speech_timestamps.json");
  const auto& ref = ts["snapshots"][0]["speech_timestamps"];
  ASSERT_EQ(segs.size(), ref.size());
  ASSERT_EQ(segs.size(), 19u);
  for (size_t i = 0; i < segs.size(); ++i) {
    EXPECT_EQ(samples_to_seconds(segs[i].start, 16000), ref[i]["start"].get<double>()) << i;
    EXPECT_EQ(samples_to_seconds(segs[i].end, 16000), ref[i]["end"].get<double>()) << i;
  }
}

TEST(OnnxSileroVad, RejectsOtherSampleRatesAndGraphs) {
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  auto vad = SileroVad::load(power::testing::silero_model());
  ASSERT_TRUE(vad.ok());
  auto r = vad->probabilities(std::vector<float>(1000, 0.0f), 44100);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("44100"), std::string::npos);
  POWER_REQUIRE_SHARED();
  auto mnist = SileroVad::load(shared_dir() + "/models/vision/mnist-8.onnx");
  ASSERT_FALSE(mnist.ok());
  EXPECT_NE(mnist.status().message().find("Silero"), std::string::npos);
}

// The graph slices and reorders its LSTM weights inside its If branches on every call; folded at
// load (LoadOptions::fold_constants), the probabilities are the same bits.
TEST(OnnxSileroVad, FoldedConstantsGiveTheSameProbabilities) {
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  POWER_REQUIRE_SHARED();
  LoadOptions off;
  off.fold_constants = false;
  auto model = Model::load_file(power::testing::silero_model());
  auto unfolded = Model::load_file(power::testing::silero_model(), off);
  ASSERT_TRUE(model.ok() && unfolded.ok());
  EXPECT_GT((*model)->folded_nodes(), 0);
  EXPECT_EQ((*unfolded)->folded_nodes(), 0);
  EXPECT_LT((*model)->op_counts()["Slice"], (*unfolded)->op_counts()["Slice"]);
  EXPECT_LT((*model)->op_counts()["Concat"], (*unfolded)->op_counts()["Concat"]);
  auto folded = SileroVad::load(power::testing::silero_model());
  auto plain = SileroVad::load(power::testing::silero_model(), off);
  ASSERT_TRUE(folded.ok() && plain.ok());
  auto audio = load_audio(shared_dir() + "/models/audio/jfk.wav");
  ASSERT_TRUE(audio.ok()) << audio.status().to_string();
  auto a = folded->probabilities(audio->samples, audio->sample_rate);
  auto b = plain->probabilities(audio->samples, audio->sample_rate);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i], (*b)[i]) << "window " << i;
}

// Microbatching (the server stacks concurrent requests' windows, onnx/service.h): streams of
// test.wav at different offsets and lengths (they finish at different steps), stepped in
// batches of 2, 5, 8 and 33 whose members change from step to step, at one and two threads,
// give every stream the bits of its solo run. The 8 kHz branch of the graph's If is stepped
// in batches too. Before the LSTM's and few-position Conv's paths were made independent of the
// batch, batches above 4 differed in the last bits.
TEST(OnnxSileroVad, BatchedStreamsGiveTheSoloBits) {
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  POWER_REQUIRE_SHARED();
  auto vad = SileroVad::load(power::testing::silero_model());
  ASSERT_TRUE(vad.ok()) << vad.status().to_string();
  auto audio = load_audio(shared_dir() + "/models/audio/test.wav");
  ASSERT_TRUE(audio.ok()) << audio.status().to_string();
  const std::vector<float>& all = audio->samples;
  struct Clip {
    std::vector<float> samples;
    int rate;
    std::vector<float> solo;
  };
  std::vector<Clip> clips;
  for (int k = 0; k < 40; ++k) {
    const size_t off = static_cast<size_t>(k) * 21011 % (all.size() - 48000);
    const size_t len = 8000 * static_cast<size_t>(1 + k % 5) + static_cast<size_t>(k) * 37;
    clips.push_back({std::vector<float>(all.begin() + off, all.begin() + off + len),
                     k < 36 ? 16000 : 8000,
                     {}});
  }
  for (Clip& c : clips) {
    auto p = vad->probabilities(c.samples, c.rate);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    c.solo = *p;
  }
  ThreadPool two(2);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
    for (const size_t batch : {size_t{2}, size_t{5}, size_t{8}, size_t{33}}) {
      for (const int rate : {16000, 8000}) {
        std::vector<VadStream> streams;
        for (const Clip& c : clips) {
          if (c.rate != rate) continue;
          auto s = SileroVad::start(c.samples, rate);
          ASSERT_TRUE(s.ok());
          streams.push_back(std::move(*s));
        }
        size_t steps = 0, widest = 0;
        for (size_t turn = 0;; ++turn) {
          std::vector<VadStream*> live;
          for (size_t i = 0; i < streams.size(); ++i) {
            VadStream& s = streams[(i + turn) % streams.size()];
            if (!s.finished() && live.size() < batch) live.push_back(&s);
          }
          if (live.empty()) break;
          Status st = vad->step(live, pool);
          ASSERT_TRUE(st.ok()) << st.to_string();
          ++steps;
          widest = std::max(widest, live.size());
        }
        EXPECT_EQ(widest, std::min(batch, streams.size()));
        size_t i = 0;
        for (const Clip& c : clips) {
          if (c.rate != rate) continue;
          const std::vector<float>& got = streams[i++].probs;
          ASSERT_EQ(got.size(), c.solo.size());
          EXPECT_EQ(std::memcmp(got.data(), c.solo.data(), got.size() * sizeof(float)), 0)
              << "batch " << batch << ", " << rate << " Hz, stream " << i - 1
              << (pool ? ", 2 threads" : ", 1 thread");
        }
        EXPECT_GT(steps, 0u);
      }
    }
  }
  // A batch that mixes rates or holds a finished stream is refused.
  auto a = SileroVad::start(clips[0].samples, 16000);
  auto b = SileroVad::start(clips[39].samples, 8000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(vad->step({&*a, &*b}).ok());
  EXPECT_FALSE(SileroVad::start(clips[0].samples, 44100).ok());
}

}  // namespace
}  // namespace power::onnx
