#include "onnx/models/silero_vad.h"

#include <algorithm>
#include <cmath>

namespace power::onnx {

Status SileroVad::validate(const Model& model) {
  const Graph& g = model.graph();
  auto find = [&](const std::string& name) -> int {
    for (size_t i = 0; i < g.input_info.size(); ++i)
      if (g.input_info[i].name == name) return static_cast<int>(i);
    return -1;
  };
  if (g.inputs.size() != 3 || find("input") < 0 || find("state") < 0 || find("sr") < 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "not a Silero VAD graph: expected inputs input, state, sr");
  }
  if (g.outputs.size() != 2) {
    return make_error(StatusCode::kInvalidArgument, "not a Silero VAD graph: expected 2 outputs");
  }
  return Status();
}

Result<SileroVad> SileroVad::load(const std::string& path, const LoadOptions& options) {
  POWER_ASSIGN_OR_RETURN(auto model, Model::load_file(path, options));
  POWER_RETURN_IF_ERROR(validate(*model));
  return SileroVad(std::move(model));
}

Result<VadStream> SileroVad::start(const std::vector<float>& samples, int sample_rate) {
  if (sample_rate != 16000 && sample_rate != 8000) {
    return make_error(StatusCode::kInvalidArgument,
                      "Silero VAD needs 16000 or 8000 Hz audio, got {} Hz", sample_rate);
  }
  VadStream s;
  s.samples = &samples;
  s.sample_rate = sample_rate;
  s.context.assign(static_cast<size_t>(context_size(sample_rate)), 0.0f);
  s.state.assign(2 * 128, 0.0f);
  return s;
}

Status SileroVad::step(const std::vector<VadStream*>& streams, ThreadPool* pool) const {
  if (streams.empty()) return Status();
  const int rate = streams[0]->sample_rate;
  for (const VadStream* s : streams) {
    if (s->sample_rate != rate || s->finished()) {
      return make_error(StatusCode::kInternal,
                        "a VAD batch mixes sample rates or holds a finished stream");
    }
  }
  const Graph& g = model_->graph();
  const int64_t B = static_cast<int64_t>(streams.size());
  const int window = window_size(rate), context = context_size(rate);
  const int64_t row = context + window;
  std::vector<float> x(static_cast<size_t>(B * row)), state(static_cast<size_t>(2 * B * 128));
  for (int64_t b = 0; b < B; ++b) {
    const VadStream& s = *streams[b];
    float* r = x.data() + b * row;
    std::copy(s.context.begin(), s.context.end(), r);
    const size_t n = std::min<size_t>(window, s.samples->size() - s.pos);
    std::copy(s.samples->begin() + s.pos, s.samples->begin() + s.pos + n, r + context);
    std::fill(r + context + n, r + row, 0.0f);
    for (int l = 0; l < 2; ++l)
      std::copy(s.state.begin() + l * 128, s.state.begin() + (l + 1) * 128,
                state.begin() + (l * B + b) * 128);
  }
  const Tensor xt = make_f32({B, row}, std::move(x));
  std::vector<Tensor> in(3);
  for (size_t i = 0; i < g.input_info.size(); ++i) {
    const std::string& name = g.input_info[i].name;
    in[i] = name == "input"   ? xt
            : name == "state" ? make_f32({2, B, 128}, std::move(state))
                              : scalar_i64(rate);
  }
  POWER_ASSIGN_OR_RETURN(auto out, model_->run(in, pool));
  if (out[0].dtype != DType::kF32 || out[0].numel() != B || out[1].dtype != DType::kF32 ||
      out[1].numel() != 2 * B * 128) {
    return make_error(StatusCode::kInvalidArgument, "Silero VAD outputs have shapes {} and {}",
                      shape_str(out[0].shape), shape_str(out[1].shape));
  }
  const float* p = out[0].data<float>();
  const float* st = out[1].data<float>();
  for (int64_t b = 0; b < B; ++b) {
    VadStream& s = *streams[b];
    s.probs.push_back(p[b]);
    for (int l = 0; l < 2; ++l)
      std::copy(st + (l * B + b) * 128, st + (l * B + b + 1) * 128, s.state.begin() + l * 128);
    // The next window's context: the end of this one's input row, padding included.
    const float* r = xt.data<float>() + (b + 1) * row - context;
    std::copy(r, r + context, s.context.begin());
    s.pos += window;
  }
  return Status();
}

Result<std::vector<float>> SileroVad::probabilities(const std::vector<float>& samples,
                                                    int sample_rate, ThreadPool* pool) const {
  POWER_ASSIGN_OR_RETURN(VadStream s, start(samples, sample_rate));
  const std::vector<VadStream*> one = {&s};
  while (!s.finished()) POWER_RETURN_IF_ERROR(step(one, pool));
  return std::move(s.probs);
}

std::vector<SpeechSegment> speech_segments(const std::vector<float>& probs, int64_t n_samples,
                                           int sample_rate, const VadOptions& opt) {
  const double window = SileroVad::window_size(sample_rate);
  const double min_speech = sample_rate * opt.min_speech_ms / 1000.0;
  const double pad = sample_rate * opt.speech_pad_ms / 1000.0;
  const double max_speech = sample_rate * opt.max_speech_s - window - 2 * pad;
  const double min_silence = sample_rate * opt.min_silence_ms / 1000.0;
  const double min_silence_at_max = sample_rate * opt.min_silence_at_max_speech_ms / 1000.0;
  const float neg =
      opt.neg_threshold >= 0 ? opt.neg_threshold : std::max(opt.threshold - 0.15f, 0.01f);

  // A segment under construction: start is set when speech triggers, end when it closes.
  struct Open {
    bool has_start = false;
    int64_t start = 0;
  } cur;
  std::vector<SpeechSegment> out;
  bool triggered = false;
  int64_t temp_end = 0, prev_end = 0, next_start = 0;
  std::vector<std::pair<int64_t, int64_t>> possible_ends;  // (silence start, duration)

  for (size_t i = 0; i < probs.size(); ++i) {
    const float p = probs[i];
    const int64_t here = static_cast<int64_t>(window) * static_cast<int64_t>(i);
    if (p >= opt.threshold && temp_end) {
      int64_t sil = here - temp_end;
      if (sil > min_silence_at_max) possible_ends.emplace_back(temp_end, sil);
      temp_end = 0;
      if (next_start < prev_end) next_start = here;
    }
    if (p >= opt.threshold && !triggered) {
      triggered = true;
      cur = {true, here};
      continue;
    }
    if (triggered && cur.has_start && static_cast<double>(here - cur.start) > max_speech) {
      if (!possible_ends.empty()) {
        std::pair<int64_t, int64_t> cut = possible_ends.back();
        if (opt.use_max_possible_silence_at_max_speech) {
          cut = possible_ends.front();
          for (const auto& e : possible_ends)
            if (e.second > cut.second) cut = e;
        }
        prev_end = cut.first;
        out.push_back({cur.start, prev_end});
        cur = {};
        next_start = prev_end + cut.second;
        if (next_start < prev_end + here) {
          cur = {true, next_start};
        } else {
          triggered = false;
        }
        std::vector<std::pair<int64_t, int64_t>> keep;
        for (const auto& e : possible_ends)
          if (e.first > next_start) keep.push_back(e);
        possible_ends = std::move(keep);
        prev_end = next_start = temp_end = 0;
      } else {
        out.push_back({cur.start, here});
        cur = {};
        prev_end = next_start = temp_end = 0;
        triggered = false;
        possible_ends.clear();
        continue;
      }
    }
    if (p < neg && triggered) {
      if (!temp_end) temp_end = here;
      if (static_cast<double>(here - temp_end) < min_silence) continue;
      if (cur.has_start && static_cast<double>(temp_end - cur.start) > min_speech) {
        out.push_back({cur.start, temp_end});
      }
      cur = {};
      prev_end = next_start = temp_end = 0;
      triggered = false;
      possible_ends.clear();
      continue;
    }
  }
  if (cur.has_start && static_cast<double>(n_samples - cur.start) > min_speech) {
    out.push_back({cur.start, n_samples});
  }
  const int64_t pad_i = static_cast<int64_t>(pad);
  for (size_t i = 0; i < out.size(); ++i) {
    if (i == 0) out[i].start = std::max<int64_t>(0, out[i].start - pad_i);
    if (i + 1 != out.size()) {
      int64_t gap = out[i + 1].start - out[i].end;
      if (static_cast<double>(gap) < 2 * pad) {
        out[i].end += gap / 2;
        out[i + 1].start = std::max<int64_t>(0, out[i + 1].start - gap / 2);
      } else {
        out[i].end = std::min(n_samples, out[i].end + pad_i);
        out[i + 1].start = std::max<int64_t>(0, out[i + 1].start - pad_i);
      }
    } else {
      out[i].end = std::min(n_samples, out[i].end + pad_i);
    }
  }
  return out;
}

double samples_to_seconds(int64_t samples, int sample_rate) {
  // Round half to even at the millisecond, like Python's round(x, 3) on these exact values.
  double ms = static_cast<double>(samples) * 1000.0 / sample_rate;
  double r = std::nearbyint(ms);
  return r / 1000.0;
}

}  // namespace power::onnx
