#include "store/download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/log.h"

namespace power::store {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kCopyChunkBytes = 1 << 20;
constexpr auto kProgressInterval = std::chrono::milliseconds(100);

// ---- RAII for libcurl handles -------------------------------------------------------------

void curl_global_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlEasyDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};
using CurlEasy = std::unique_ptr<CURL, CurlEasyDeleter>;

struct CurlSlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using CurlSlist = std::unique_ptr<curl_slist, CurlSlistDeleter>;

CurlEasy make_easy() {
  curl_global_once();
  CurlEasy h(curl_easy_init());
  POWER_CHECK_MSG(h != nullptr, "curl_easy_init failed");
  return h;
}

Status errno_error(std::string_view what, const std::string& path, int err) {
  StatusCode code =
      (err == ENOSPC || err == EDQUOT) ? StatusCode::kResourceExhausted : StatusCode::kIo;
  return Status(code, fmt::format("{}: {}", what, std::strerror(err))).with("path", path);
}

// ---- the staging file: append, hash, cap --------------------------------------------------

class StagingWriter {
 public:
  StagingWriter(std::string path, uint64_t cap_bytes, uint64_t fault_limit_bytes)
      : path_(std::move(path)), cap_(cap_bytes), fault_limit_(fault_limit_bytes) {}

  // Opens the staging file; with keep_prefix, hashes what it already holds.
  Status open(bool keep_prefix) {
    fd_ = UniqueFd(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd_.valid() && errno == EACCES && ::chmod(path_.c_str(), 0644) == 0) {
      // Made read-only by a commit that was interrupted before its rename.
      fd_ = UniqueFd(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    }
    if (!fd_.valid()) return io_error("cannot open staging file", errno);
    if (!keep_prefix) return restart();
    std::vector<uint8_t> buf(kCopyChunkBytes);
    for (;;) {
      ssize_t n = ::read(fd_.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("cannot read staging file", errno);
      if (n == 0) break;
      hasher_.update(buf.data(), static_cast<size_t>(n));
      size_ += static_cast<uint64_t>(n);
    }
    if (cap_ != 0 && size_ > cap_) return restart();  // a stale prefix larger than allowed
    return Status();
  }

  Status restart() {
    if (::ftruncate(fd_.get(), 0) != 0 || ::lseek(fd_.get(), 0, SEEK_SET) != 0) {
      return io_error("cannot truncate staging file", errno);
    }
    hasher_ = Sha256();
    size_ = 0;
    return Status();
  }

  // Appends bytes; kResourceExhausted when they would exceed the cap.
  Status append(const uint8_t* p, size_t n) {
    if (cap_ != 0 && size_ + n > cap_) {
      return Status(StatusCode::kResourceExhausted,
                    "body is larger than allowed (declared size or max_download_bytes)")
          .with("cap_bytes", cap_)
          .with("received_bytes", size_ + n);
    }
    size_t allowed = n;
    bool inject = false;
    if (fault_limit_ != 0 && size_ + n > fault_limit_) {
      allowed = static_cast<size_t>(fault_limit_ > size_ ? fault_limit_ - size_ : 0);
      inject = true;
    }
    const uint8_t* q = p;
    size_t left = allowed;
    while (left > 0) {
      ssize_t w = ::write(fd_.get(), q, left);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return io_error("cannot write staging file", errno);
      q += w;
      left -= static_cast<size_t>(w);
    }
    hasher_.update(p, allowed);
    size_ += allowed;
    if (inject) {
      return io_error("cannot write staging file (injected fault)", ENOSPC);
    }
    return Status();
  }

  Status finish(Sha256Digest* digest) {
    if (::fsync(fd_.get()) != 0) return io_error("fsync of staging file failed", errno);
    *digest = hasher_.finish();
    return Status();
  }

  uint64_t size() const { return size_; }
  bool io_failed() const { return io_failed_; }

 private:
  Status io_error(std::string_view what, int err) {
    io_failed_ = true;
    return errno_error(what, path_, err);
  }

  std::string path_;
  uint64_t cap_;
  uint64_t fault_limit_;
  UniqueFd fd_;
  Sha256 hasher_;
  uint64_t size_ = 0;
  bool io_failed_ = false;
};

class ProgressThrottle {
 public:
  explicit ProgressThrottle(const FetchOptions& o) : cb_(o.on_progress) {}
  void update(uint64_t completed, uint64_t total, uint64_t attempt_bytes, bool force) {
    if (!cb_) return;
    auto now = Clock::now();
    if (!force && now - last_ < kProgressInterval) return;
    if (force && emitted_ && completed == last_completed_) return;  // nothing new to say
    last_ = now;
    emitted_ = true;
    last_completed_ = completed;
    double secs = std::chrono::duration<double>(now - start_).count();
    cb_(completed, total, secs > 0 ? static_cast<double>(attempt_bytes) / secs : 0.0);
  }

 private:
  std::function<void(uint64_t, uint64_t, double)> cb_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_{};
  bool emitted_ = false;
  uint64_t last_completed_ = 0;
};

bool cancelled(const FetchOptions& o) {
  return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed);
}

Status cancelled_status() {
  return Status(StatusCode::kCancelled, "pull cancelled");
}

int on_xferinfo(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return cancelled(*static_cast<const FetchOptions*>(user)) ? 1 : 0;
}

// ---- staging sidecar ----------------------------------------------------------------------

struct StagingMeta {
  std::string url;
  std::string etag;
  std::string last_modified;
  std::string validator() const { return !etag.empty() ? etag : last_modified; }
};

std::string meta_path(const std::string& staging) {
  return staging + ".meta";
}

std::optional<StagingMeta> read_meta(const std::string& staging) {
  auto text = read_file_text(meta_path(staging));
  if (!text.ok()) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("schema", "") != "power.staging.v1") {
    return std::nullopt;  // torn or foreign: treated as absent
  }
  StagingMeta m;
  m.url = j.value("url", "");
  m.etag = j.value("etag", "");
  m.last_modified = j.value("last_modified", "");
  return m;
}

void write_meta(const std::string& staging, const StagingMeta& m) {
  nlohmann::ordered_json j;
  j["schema"] = "power.staging.v1";
  j["url"] = m.url;
  j["etag"] = m.etag;
  j["last_modified"] = m.last_modified;
  // Plain write: a torn sidecar fails to parse and only costs a restart from byte 0.
  std::string text = j.dump();
  UniqueFd fd(::open(meta_path(staging).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.valid()) {
    ssize_t ignored = ::write(fd.get(), text.data(), text.size());
    (void)ignored;
  }
}

// ---- one HTTP transfer ----------------------------------------------------------------------

struct ContentRange {
  uint64_t first = 0;
  std::optional<uint64_t> total;
};

std::string_view trim_view(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "bytes 100-199/200" or "bytes 100-199/*".
std::optional<ContentRange> parse_content_range(std::string_view v) {
  if (!v.starts_with("bytes ")) return std::nullopt;
  v.remove_prefix(6);
  auto dash = v.find('-');
  auto slash = v.find('/');
  if (dash == v.npos || slash == v.npos || dash > slash) return std::nullopt;
  ContentRange cr;
  auto first = parse_u64(v.substr(0, dash));
  if (!first) return std::nullopt;
  cr.first = *first;
  std::string_view total = v.substr(slash + 1);
  if (total != "*") {
    cr.total = parse_u64(total);
    if (!cr.total) return std::nullopt;
  }
  return cr;
}

struct Transfer {
  CURL* curl = nullptr;
  const FetchOptions* options = nullptr;
  StagingWriter* writer = nullptr;
  ProgressThrottle* progress = nullptr;
  std::string url;
  std::string staging_path;
  // Headers of the current response (reset at each status line: redirects, 100 Continue).
  std::optional<uint64_t> content_length;
  std::optional<ContentRange> content_range;
  std::string etag, last_modified;
  // State once the body of the final response began.
  bool body_started = false;
  std::optional<uint64_t> total;
  uint64_t attempt_bytes = 0;
  bool restarted = false;
  Status error;
  bool error_retryable = false;
  bool error_keep_partial = true;

  void fail(Status st, bool retryable, bool keep_partial) {
    if (!error.ok()) return;
    error = std::move(st);
    error_retryable = retryable;
    error_keep_partial = keep_partial;
  }

  // Decides, at the first body byte (or the end of an empty body), what the response means.
  bool begin_body() {
    body_started = true;
    long code = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (code == 206) {
      if (!content_range || content_range->first != writer->size()) {
        fail(Status(StatusCode::kCorrupt, "206 response does not continue the partial download")
                 .with("partial_bytes", writer->size()),
             /*retryable=*/true, /*keep_partial=*/false);
        return false;
      }
      total = content_range->total;
    } else {
      if (writer->size() > 0) {
        POWER_LOG_INFO("server answered a Range request with {}: restarting {}", code, url);
        Status st = writer->restart();
        if (!st.ok()) {
          fail(std::move(st), false, false);
          return false;
        }
        restarted = true;
      }
      total = content_length;
      StagingMeta m{url, etag, last_modified};
      if (!m.validator().empty()) {
        write_meta(staging_path, m);
      } else {
        ::unlink(meta_path(staging_path).c_str());  // never resume against a stale validator
      }
    }
    if (total) {
      const auto& expected = options->expected_size_bytes;
      if (expected && *total != *expected) {
        fail(Status(StatusCode::kIntegrity, "server announces a different size than declared")
                 .with("announced_bytes", *total)
                 .with("declared_bytes", *expected),
             false, false);
        return false;
      }
      if (options->cap_bytes != 0 && *total > options->cap_bytes) {
        fail(Status(StatusCode::kResourceExhausted,
                    "server announces a body larger than allowed (max_download_bytes)")
                 .with("announced_bytes", *total)
                 .with("cap_bytes", options->cap_bytes),
             false, false);
        return false;
      }
    }
    return true;
  }
};

size_t on_header(char* data, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * nitems);
  if (line.starts_with("HTTP/")) {
    t->content_length.reset();
    t->content_range.reset();
    t->etag.clear();
    t->last_modified.clear();
    return line.size();
  }
  auto colon = line.find(':');
  if (colon == line.npos) return line.size();
  std::string key(line.substr(0, colon));
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view value = trim_view(line.substr(colon + 1));
  if (key == "content-length") {
    t->content_length = parse_u64(value);
  } else if (key == "content-range") {
    t->content_range = parse_content_range(value);
  } else if (key == "etag") {
    t->etag = std::string(value);
  } else if (key == "last-modified") {
    t->last_modified = std::string(value);
  }
  return line.size();
}

size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * nmemb;
  if (!t->body_started && !t->begin_body()) return 0;  // aborts with CURLE_WRITE_ERROR
  Status st = t->writer->append(reinterpret_cast<const uint8_t*>(data), n);
  if (!st.ok()) {
    t->fail(std::move(st), false, /*keep_partial=*/false);
    return 0;
  }
  t->attempt_bytes += n;
  t->progress->update(t->writer->size(), t->total.value_or(0), t->attempt_bytes, false);
  return n;
}

FetchResult from_error(Status st, bool retryable, bool keep_partial) {
  FetchResult r;
  r.status = std::move(st);
  r.retryable = retryable;
  r.keep_partial = keep_partial;
  return r;
}

bool retryable_http(long code) {
  return code == 408 || code == 429 || code >= 500;
}

}  // namespace

void remove_staging(const std::string& staging_path) {
  ::unlink(staging_path.c_str());
  ::unlink(meta_path(staging_path).c_str());
}

Result<Sha256Digest> hash_staging_file(const std::string& staging_path) {
  return sha256_file(staging_path);
}

FetchResult fetch_url(const std::string& url, const std::string& staging_path,
                      const FetchOptions& options) {
  StagingWriter writer(staging_path, options.cap_bytes, options.fault_write_limit_bytes);
  std::optional<StagingMeta> meta = read_meta(staging_path);
  bool have_validator = meta && meta->url == url && !meta->validator().empty();
  bool keep_prefix = options.resume && (have_validator || !options.resume_requires_validator);
  if (Status st = writer.open(keep_prefix); !st.ok()) {
    FetchResult r = from_error(std::move(st), false, false);
    r.local_failure = true;
    return r;
  }
  if (!keep_prefix) ::unlink(meta_path(staging_path).c_str());

  FetchResult result;
  result.resumed_from_bytes = writer.size();
  ProgressThrottle progress(options);
  CurlEasy easy = make_easy();
  CURL* h = easy.get();
  Transfer t;
  t.curl = h;
  t.options = &options;
  t.writer = &writer;
  t.progress = &progress;
  t.url = url;
  t.staging_path = staging_path;

  char errbuf[CURL_ERROR_SIZE] = {0};
  const bool https = url.size() >= 8 && strncasecmp(url.c_str(), "https://", 8) == 0;
  CurlSlist headers;
  auto add_header = [&](const std::string& line) {
    curl_slist* l = curl_slist_append(headers.get(), line.c_str());
    POWER_CHECK(l != nullptr);
    (void)headers.release();
    headers.reset(l);
  };
  if (!options.bearer_token.empty()) add_header("Authorization: Bearer " + options.bearer_token);
  std::string range;
  if (writer.size() > 0) {
    range = fmt::format("{}-", writer.size());
    if (have_validator) add_header("If-Range: " + meta->validator());
  }
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, https ? "https" : "http,https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, static_cast<long>(options.config.max_redirects));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, static_cast<long>(options.config.connect_timeout_s));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.config.low_speed_time_s));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT,
                   static_cast<long>(options.config.low_speed_limit_bytes_per_s));
  curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "power/" POWER_VERSION);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);  // for cancellation, also while stalled
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &options);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  if (headers) curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  if (!range.empty()) curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());

  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  result.http_status = code;
  if (rc == CURLE_OK && !t.body_started) t.begin_body();  // an empty body
  result.restarted = t.restarted;
  result.size_bytes = writer.size();
  progress.update(writer.size(), t.total.value_or(0), t.attempt_bytes, true);

  auto with_context = [&](Status st) {
    return std::move(st).with("url", url).with("received_bytes", writer.size());
  };
  auto fail = [&](Status st, bool retryable, bool keep_partial) {
    FetchResult r = from_error(with_context(std::move(st)), retryable, keep_partial);
    r.size_bytes = writer.size();
    r.resumed_from_bytes = result.resumed_from_bytes;
    r.restarted = t.restarted;
    r.http_status = code;
    r.local_failure = writer.io_failed();
    return r;
  };
  if (!t.error.ok()) return fail(std::move(t.error), t.error_retryable, t.error_keep_partial);
  const std::string detail = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
  switch (rc) {
    case CURLE_OK:
      break;
    case CURLE_ABORTED_BY_CALLBACK:
      return fail(cancelled_status(), false, true);
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return fail(Status(StatusCode::kIo, fmt::format("connection closed early: {}", detail))
                      .with("expected_bytes", t.total ? fmt::format("{}", *t.total) : "unknown"),
                  true, true);
    case CURLE_OPERATION_TIMEDOUT:
      return fail(Status(StatusCode::kDeadlineExceeded,
                         fmt::format("transfer timed out or stalled: {}", detail)),
                  true, true);
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SSL_CONNECT_ERROR:
      return fail(Status(StatusCode::kIo, fmt::format("cannot connect: {}", detail)), true, true);
    case CURLE_TOO_MANY_REDIRECTS:
      return fail(
          Status(StatusCode::kInvalidArgument,
                 fmt::format("too many redirects (more than {})", options.config.max_redirects)),
          false, true);
    case CURLE_UNSUPPORTED_PROTOCOL:
      return fail(Status(StatusCode::kUnsupported,
                         fmt::format("redirect to a refused protocol (only http/https, and "
                                     "never https to http): {}",
                                     detail)),
                  false, true);
    case CURLE_HTTP_RETURNED_ERROR:
      if (code == 416) {
        return fail(Status(StatusCode::kOutOfRange, "server cannot satisfy the Range request"),
                    true, false);
      }
      return fail(Status(code == 404 ? StatusCode::kNotFound : StatusCode::kIo,
                         fmt::format("HTTP {}", code)),
                  retryable_http(code), true);
    default:
      return fail(Status(StatusCode::kIo, fmt::format("download failed: {}", detail)), false, true);
  }
  if (code != 200 && code != 206 && !(code >= 200 && code < 300)) {
    return fail(Status(StatusCode::kIo, fmt::format("unexpected HTTP status {}", code)), false,
                true);
  }
  if (t.total && writer.size() < *t.total) {
    return fail(Status(StatusCode::kIo, "connection closed early (body shorter than announced)")
                    .with("expected_bytes", *t.total),
                true, true);
  }
  if (options.expected_size_bytes && writer.size() != *options.expected_size_bytes) {
    return fail(Status(StatusCode::kIo, "body shorter than the declared size")
                    .with("declared_bytes", *options.expected_size_bytes),
                true, true);
  }
  if (Status st = writer.finish(&result.digest); !st.ok()) return fail(std::move(st), false, false);
  result.status = Status();
  return result;
}

FetchResult copy_local_file(const std::string& path, const std::string& staging_path,
                            const FetchOptions& options) {
  UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) {
    const int err = errno;
    Status st = err == ENOENT ? Status(StatusCode::kNotFound, "no such file").with("path", path)
                              : errno_error("cannot open source file", path, err);
    return from_error(std::move(st), false, true);
  }
  struct stat st {};
  if (::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return from_error(Status(StatusCode::kInvalidArgument, "not a regular file").with("path", path),
                      false, true);
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (options.expected_size_bytes && file_size != *options.expected_size_bytes) {
    return from_error(Status(StatusCode::kIntegrity, "file size differs from the declared size")
                          .with("path", path)
                          .with("size_bytes", file_size)
                          .with("declared_bytes", *options.expected_size_bytes),
                      false, true);
  }
  if (options.cap_bytes != 0 && file_size > options.cap_bytes) {
    return from_error(Status(StatusCode::kResourceExhausted, "file is larger than allowed")
                          .with("path", path)
                          .with("size_bytes", file_size)
                          .with("cap_bytes", options.cap_bytes),
                      false, true);
  }
  StagingWriter writer(staging_path, options.cap_bytes, options.fault_write_limit_bytes);
  auto local = [&](Status s) {
    FetchResult r = from_error(std::move(s), false, false);
    r.local_failure = writer.io_failed();
    return r;
  };
  if (Status s = writer.open(false); !s.ok()) return local(std::move(s));
  ::unlink(meta_path(staging_path).c_str());
  ProgressThrottle progress(options);
  std::vector<uint8_t> buf(kCopyChunkBytes);
  for (;;) {
    if (cancelled(options)) return from_error(cancelled_status(), false, false);
    ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return from_error(errno_error("cannot read source file", path, errno), false, false);
    if (n == 0) break;
    if (Status s = writer.append(buf.data(), static_cast<size_t>(n)); !s.ok()) {
      return local(std::move(s));
    }
    progress.update(writer.size(), file_size, writer.size(), false);
  }
  progress.update(writer.size(), file_size, writer.size(), true);
  FetchResult r;
  r.size_bytes = writer.size();
  if (Status s = writer.finish(&r.digest); !s.ok()) return local(std::move(s));
  return r;
}

Result<HttpResponse> http_get(const std::string& url, uint64_t max_body_bytes, int64_t timeout_ms) {
  CurlEasy easy = make_easy();
  CURL* h = easy.get();
  struct Sink {
    std::string body;
    uint64_t max;
  } sink{{}, max_body_bytes};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(h, CURLOPT_USERAGENT, "power/" POWER_VERSION);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(
      h, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t nmemb, void* user) -> size_t {
        auto* s = static_cast<Sink*>(user);
        if (s->body.size() + size * nmemb > s->max) return 0;
        s->body.append(data, size * nmemb);
        return size * nmemb;
      });
  CURLcode rc = curl_easy_perform(h);
  long os_errno = 0;
  curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
  if (rc == CURLE_COULDNT_CONNECT && os_errno == ECONNREFUSED) {
    return Status(StatusCode::kIo, "connection refused").with("url", url);
  }
  if (rc != CURLE_OK) {
    return Status(StatusCode::kIo, errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc))
        .with("url", url);
  }
  HttpResponse r;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
  r.body = std::move(sink.body);
  return r;
}

}  // namespace power::store
