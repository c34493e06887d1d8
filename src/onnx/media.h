// Image and audio decoding for the ONNX models, through Debian libraries: stb_image (PNG, JPEG,
// BMP, PNM, TGA, GIF), libtiff (TIFF) and libsndfile (WAV and the other formats it reads).
// Every failure is a Status naming the file; nothing here aborts on bad input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace power::onnx {

struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;           // 1 (gray) or 3 (RGB)
  std::vector<uint8_t> data;  // top-down rows, interleaved channels
};

// channels: 1 converts to gray, 3 to RGB. Images larger than 2^28 pixels are refused.
Result<Image> load_image(const std::string& path, int channels);
Result<Image> decode_image(const uint8_t* bytes, size_t size, int channels);

struct Audio {
  int sample_rate = 0;
  std::vector<float> samples;  // mono, [-1, 1] (16-bit PCM divided by 32768)
};

// Mono files only (multichannel is an error: mixing down is the caller's choice).
Result<Audio> load_audio(const std::string& path);
Result<Audio> decode_audio(const uint8_t* bytes, size_t size);

}  // namespace power::onnx
