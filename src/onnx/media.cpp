#include "onnx/media.h"

#include <sndfile.h>
#include <stb/stb_image.h>
#include <tiffio.h>

#include <cstring>
#include <memory>

#include "base/file.h"

namespace power::onnx {
namespace {

constexpr int64_t kMaxPixels = int64_t{1} << 28;

bool is_tiff(const uint8_t* b, size_t n) {
  return n >= 4 && ((b[0] == 'I' && b[1] == 'I' && b[2] == 42 && b[3] == 0) ||
                    (b[0] == 'M' && b[1] == 'M' && b[2] == 0 && b[3] == 42));
}

// libtiff reading from memory.
struct MemStream {
  const uint8_t* data;
  size_t size;
  size_t pos;
};
tsize_t mem_read(thandle_t h, tdata_t buf, tsize_t n) {
  auto* m = static_cast<MemStream*>(h);
  size_t left = m->size - m->pos;
  size_t k = std::min(left, static_cast<size_t>(n));
  std::memcpy(buf, m->data + m->pos, k);
  m->pos += k;
  return static_cast<tsize_t>(k);
}
tsize_t mem_write(thandle_t, tdata_t, tsize_t) {
  return 0;
}
toff_t mem_seek(thandle_t h, toff_t off, int whence) {
  auto* m = static_cast<MemStream*>(h);
  uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size;
  uint64_t p = base + off;
  if (p > m->size) return static_cast<toff_t>(-1);
  m->pos = static_cast<size_t>(p);
  return p;
}
int mem_close(thandle_t) {
  return 0;
}
toff_t mem_size(thandle_t h) {
  return static_cast<MemStream*>(h)->size;
}
int mem_map(thandle_t, tdata_t*, toff_t*) {
  return 0;
}
void mem_unmap(thandle_t, tdata_t, toff_t) {}

void silent_handler(const char*, const char*, va_list) {}

Result<Image> decode_tiff(const uint8_t* bytes, size_t size, int channels) {
  TIFFSetErrorHandler(silent_handler);
  TIFFSetWarningHandler(silent_handler);
  MemStream ms{bytes, size, 0};
  TIFF* tif = TIFFClientOpen("image", "rm", &ms, mem_read, mem_write, mem_seek, mem_close, mem_size,
                             mem_map, mem_unmap);
  if (!tif) return make_error(StatusCode::kCorrupt, "not a readable TIFF image");
  std::unique_ptr<TIFF, void (*)(TIFF*)> guard(tif, TIFFClose);
  uint32_t w = 0, h = 0;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  if (w == 0 || h == 0 || static_cast<int64_t>(w) * h > kMaxPixels) {
    return make_error(StatusCode::kCorrupt, "TIFF image size {}x{} is empty or too large", w, h);
  }
  std::vector<uint32_t> rgba(static_cast<size_t>(w) * h);
  if (!TIFFReadRGBAImageOriented(tif, w, h, rgba.data(), ORIENTATION_TOPLEFT, 0)) {
    return make_error(StatusCode::kCorrupt, "TIFF image data could not be decoded");
  }
  Image img;
  img.width = static_cast<int>(w);
  img.height = static_cast<int>(h);
  img.channels = channels;
  img.data.resize(rgba.size() * channels);
  for (size_t i = 0; i < rgba.size(); ++i) {
    uint32_t p = rgba[i];
    uint8_t r = TIFFGetR(p), g = TIFFGetG(p), b = TIFFGetB(p);
    if (channels == 3) {
      img.data[i * 3] = r;
      img.data[i * 3 + 1] = g;
      img.data[i * 3 + 2] = b;
    } else {
      img.data[i] = static_cast<uint8_t>((r * 77 + g * 150 + b * 29) >> 8);
    }
  }
  return img;
}

}  // namespace

Result<Image> decode_image(const uint8_t* bytes, size_t size, int channels) {
  if (channels != 1 && channels != 3)
    return make_error(StatusCode::kInvalidArgument, "channels must be 1 or 3");
  if (size == 0) return make_error(StatusCode::kCorrupt, "empty image");
  if (is_tiff(bytes, size)) return decode_tiff(bytes, size, channels);
  if (size > static_cast<size_t>(INT32_MAX))
    return make_error(StatusCode::kUnsupported, "image too large");
  int w = 0, h = 0, n = 0;
  if (!stbi_info_from_memory(bytes, static_cast<int>(size), &w, &h, &n)) {
    return make_error(StatusCode::kCorrupt, "unrecognized or corrupt image ({})",
                      stbi_failure_reason());
  }
  if (w <= 0 || h <= 0 || static_cast<int64_t>(w) * h > kMaxPixels) {
    return make_error(StatusCode::kCorrupt, "image size {}x{} is empty or too large", w, h);
  }
  stbi_uc* px = stbi_load_from_memory(bytes, static_cast<int>(size), &w, &h, &n, channels);
  if (!px)
    return make_error(StatusCode::kCorrupt, "image could not be decoded ({})",
                      stbi_failure_reason());
  Image img;
  img.width = w;
  img.height = h;
  img.channels = channels;
  img.data.assign(px, px + static_cast<size_t>(w) * h * channels);
  stbi_image_free(px);
  return img;
}

Result<Image> load_image(const std::string& path, int channels) {
  auto bytes = read_file(path);
  if (!bytes.ok()) return std::move(bytes).take_status();
  auto img = decode_image(bytes->data(), bytes->size(), channels);
  if (!img.ok()) return std::move(img).take_status().with("file", path);
  return img;
}

namespace {

struct SfMem {
  const uint8_t* data;
  sf_count_t size;
  sf_count_t pos;
};
sf_count_t sf_len(void* u) {
  return static_cast<SfMem*>(u)->size;
}
sf_count_t sf_seek(sf_count_t off, int whence, void* u) {
  auto* m = static_cast<SfMem*>(u);
  sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->size;
  sf_count_t p = base + off;
  if (p < 0 || p > m->size) return -1;
  m->pos = p;
  return p;
}
sf_count_t sf_read(void* ptr, sf_count_t n, void* u) {
  auto* m = static_cast<SfMem*>(u);
  sf_count_t k = std::min(n, m->size - m->pos);
  if (k <= 0) return 0;
  std::memcpy(ptr, m->data + m->pos, static_cast<size_t>(k));
  m->pos += k;
  return k;
}
sf_count_t sf_write(const void*, sf_count_t, void*) {
  return 0;
}
sf_count_t sf_tell(void* u) {
  return static_cast<SfMem*>(u)->pos;
}

}  // namespace

Result<Audio> decode_audio(const uint8_t* bytes, size_t size) {
  SfMem mem{bytes, static_cast<sf_count_t>(size), 0};
  SF_VIRTUAL_IO io{sf_len, sf_seek, sf_read, sf_write, sf_tell};
  SF_INFO info{};
  SNDFILE* f = sf_open_virtual(&io, SFM_READ, &info, &mem);
  if (!f) return make_error(StatusCode::kCorrupt, "unreadable audio ({})", sf_strerror(nullptr));
  std::unique_ptr<SNDFILE, int (*)(SNDFILE*)> guard(f, sf_close);
  if (info.channels != 1) {
    return make_error(StatusCode::kUnsupported, "audio has {} channels; mono is required",
                      info.channels);
  }
  if (info.frames < 0 || info.frames > (int64_t{1} << 31))
    return make_error(StatusCode::kCorrupt, "audio length {}", info.frames);
  Audio a;
  a.sample_rate = info.samplerate;
  a.samples.resize(static_cast<size_t>(info.frames));
  sf_count_t got = sf_readf_float(f, a.samples.data(), info.frames);
  if (got != info.frames) {
    return make_error(StatusCode::kCorrupt, "audio truncated: {} of {} frames", got, info.frames);
  }
  return a;
}

Result<Audio> load_audio(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes.ok()) return std::move(bytes).take_status();
  auto a = decode_audio(bytes->data(), bytes->size());
  if (!a.ok()) return std::move(a).take_status().with("file", path);
  return a;
}

}  // namespace power::onnx
