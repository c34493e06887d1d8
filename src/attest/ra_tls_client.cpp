// fetch_peer_certificate(): one TLS connection to an RA-TLS server (TCP or a unix socket), the
// peer's certificate, and optionally one plain HTTP/1.1 GET /v1/attestation on the same
// connection (so the fresh evidence provably comes from the key the handshake was with).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "attest/ra_tls_client.h"
#include "attest/snp_verify.h"
#include "attest/x509_util.h"

namespace power::attest {
namespace {

// An answer bigger than this is not an attestation answer (a few KiB of base64 and a PEM).
constexpr size_t kMaxResponseBytes = size_t{4} << 20;

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// OpenSSL writes to the socket with write(2): a peer that closes first raises SIGPIPE, which
// would kill the embedding process. Linux has no per-socket opt-out (MSG_NOSIGNAL needs send()),
// so SIGPIPE is blocked on this thread for the call and one raised meanwhile is discarded;
// the process's disposition is left alone.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

struct Target {
  bool unix_socket = false;
  std::string host;  // TCP host without brackets, or the socket path
  std::string port;
};

Result<Target> parse_target(const std::string& text) {
  Target t;
  if (text.rfind("unix://", 0) == 0) {
    t.unix_socket = true;
    t.host = text.substr(7);
    if (t.host.empty() || t.host[0] != '/') {
      return make_error(StatusCode::kInvalidArgument, "unix target must be unix:///absolute/path")
          .with("target", text);
    }
    return t;
  }
  if (text.rfind("https://", 0) != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "target must be https://HOST:PORT or unix:///path.sock")
        .with("target", text);
  }
  std::string rest = text.substr(8);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t colon = std::string::npos;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) {
      return make_error(StatusCode::kInvalidArgument, "unclosed [ in target").with("target", text);
    }
    t.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') colon = close + 1;
  } else {
    colon = rest.rfind(':');
    t.host = rest.substr(0, colon);
  }
  t.port = colon == std::string::npos ? "443" : rest.substr(colon + 1);
  if (t.host.empty() || t.port.empty() ||
      t.port.find_first_not_of("0123456789") != std::string::npos ||
      t.host.find('/') != std::string::npos) {
    return make_error(StatusCode::kInvalidArgument, "target must be https://HOST:PORT")
        .with("target", text);
  }
  return t;
}

void set_timeouts(int fd, int timeout_ms) {
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  // SO_SNDTIMEO also bounds connect() on Linux.
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

Result<Socket> connect_target(const Target& t, int timeout_ms) {
  if (t.unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (t.host.size() >= sizeof(addr.sun_path)) {
      return make_error(StatusCode::kInvalidArgument, "unix socket path too long")
          .with("path", t.host);
    }
    std::memcpy(addr.sun_path, t.host.c_str(), t.host.size() + 1);
    Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.get() < 0) return make_error(StatusCode::kIo, "socket: {}", std::strerror(errno));
    set_timeouts(s.get(), timeout_ms);
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return make_error(StatusCode::kIo, "connect: {}", std::strerror(errno)).with("path", t.host);
    }
    return s;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(t.host.c_str(), t.port.c_str(), &hints, &found);
  if (rc != 0) {
    return make_error(StatusCode::kIo, "cannot resolve host: {}", gai_strerror(rc))
        .with("host", t.host);
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (s.get() < 0) continue;
    set_timeouts(s.get(), timeout_ms);
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) == 0) return s;
    last_error = std::strerror(errno);
  }
  return make_error(StatusCode::kIo, "connect: {}", last_error)
      .with("host", t.host)
      .with("port", t.port);
}

Status ssl_error(std::string_view what, SSL* ssl, int rc) {
  const int err = ssl != nullptr ? SSL_get_error(ssl, rc) : 0;
  return make_error(StatusCode::kIo, "TLS {} failed", what)
      .with("ssl_error", err)
      .with("openssl", detail::drain_openssl_errors());
}

// Body of an HTTP/1.1 response once complete: by Content-Length, chunked, or (neither) the
// connection's end (`closed`). nullopt: more bytes are needed.
Result<std::optional<std::string>> complete_body(const std::string& raw, bool closed, int* status) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return std::optional<std::string>();
  const std::string head = raw.substr(0, head_end);
  if (head.rfind("HTTP/1.", 0) != 0 || head.size() < 12) {
    return make_error(StatusCode::kCorrupt, "not an HTTP/1.x response");
  }
  *status = std::atoi(head.c_str() + 9);
  std::string lower = head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string body = raw.substr(head_end + 4);
  const size_t cl = lower.find("\r\ncontent-length:");
  if (cl != std::string::npos) {
    const size_t want = std::strtoull(lower.c_str() + cl + 17, nullptr, 10);
    if (want > kMaxResponseBytes)
      return make_error(StatusCode::kResourceExhausted, "response too large");
    if (body.size() < want) return std::optional<std::string>();
    return std::optional<std::string>(body.substr(0, want));
  }
  if (lower.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    std::string out;
    size_t at = 0;
    for (;;) {
      const size_t line_end = body.find("\r\n", at);
      if (line_end == std::string::npos) return std::optional<std::string>();
      const size_t n = std::strtoull(body.c_str() + at, nullptr, 16);
      if (n == 0) return std::optional<std::string>(out);
      if (n > kMaxResponseBytes)
        return make_error(StatusCode::kResourceExhausted, "chunk too large");
      if (body.size() < line_end + 2 + n + 2) return std::optional<std::string>();
      out.append(body, line_end + 2, n);
      at = line_end + 2 + n + 2;
    }
  }
  if (closed) return std::optional<std::string>(body);
  return std::optional<std::string>();
}

Result<nlohmann::json> get_attestation(SSL* ssl, const Target& t, std::span<const uint8_t> nonce,
                                       const std::string& api_key) {
  std::string request = fmt::format(
      "GET /v1/attestation?nonce={} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n"
      "Connection: close\r\n",
      snp_hex(nonce), t.unix_socket ? "localhost" : t.host);
  if (!api_key.empty()) request += fmt::format("Authorization: Bearer {}\r\n", api_key);
  request += "\r\n";
  const int wrote = SSL_write(ssl, request.data(), static_cast<int>(request.size()));
  if (wrote != static_cast<int>(request.size())) return ssl_error("write", ssl, wrote);
  std::string raw;
  int status = 0;
  std::optional<std::string> body;
  char buf[16384];
  for (;;) {
    const int n = SSL_read(ssl, buf, sizeof(buf));
    if (n <= 0) {
      const int err = SSL_get_error(ssl, n);
      if (err == SSL_ERROR_ZERO_RETURN || err == SSL_ERROR_SYSCALL) {
        // The server closed (Connection: close), with or without close_notify: what arrived
        // is the answer if its framing says it is whole.
        detail::drain_openssl_errors();
        POWER_ASSIGN_OR_RETURN(body, complete_body(raw, /*closed=*/true, &status));
        if (!body) return make_error(StatusCode::kIo, "connection closed mid-answer");
        break;
      }
      return ssl_error("read", ssl, n);
    }
    raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > kMaxResponseBytes) {
      return make_error(StatusCode::kResourceExhausted, "attestation answer over 4 MiB");
    }
    POWER_ASSIGN_OR_RETURN(body, complete_body(raw, /*closed=*/false, &status));
    if (body) break;
  }
  if (status != 200) {
    return make_error(StatusCode::kIo, "GET /v1/attestation answered HTTP {}", status)
        .with("body", body->substr(0, 300));
  }
  nlohmann::json j = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(StatusCode::kCorrupt, "attestation answer is not JSON");
  return j;
}

}  // namespace

Result<RaTlsPeer> fetch_peer_certificate(const std::string& target,
                                         const RaTlsFetchOptions& options) {
  const SigpipeBlock no_sigpipe;  // first, so it outlives the socket and the TLS session
  POWER_ASSIGN_OR_RETURN(Target t, parse_target(target));
  if (options.nonce && (options.nonce->empty() || options.nonce->size() > 64)) {
    return make_error(StatusCode::kInvalidArgument, "nonce must be 1 to 64 bytes");
  }
  POWER_ASSIGN_OR_RETURN(Socket sock, connect_target(t, options.timeout_ms));
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return ssl_error("context", nullptr, 0);
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // No chain verification: the server's certificate is self-signed on purpose, and trust comes
  // from the attestation evidence inside it, which the caller verifies next.
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  std::unique_ptr<SSL, SslFree> ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), sock.get()) != 1) return ssl_error("setup", nullptr, 0);
  if (!t.unix_socket) {
    in6_addr ip6{};
    in_addr ip4{};
    const bool literal = ::inet_pton(AF_INET, t.host.c_str(), &ip4) == 1 ||
                         ::inet_pton(AF_INET6, t.host.c_str(), &ip6) == 1;
    if (!literal) SSL_set_tlsext_host_name(ssl.get(), t.host.c_str());
  }
  const int rc = SSL_connect(ssl.get());
  if (rc != 1) return ssl_error("handshake", ssl.get(), rc);
  X509* peer = SSL_get1_peer_certificate(ssl.get());
  if (peer == nullptr) return make_error(StatusCode::kIo, "the server sent no certificate");
  detail::X509Ptr peer_owned(peer);
  RaTlsPeer out;
  unsigned char* der = nullptr;
  const int len = i2d_X509(peer, &der);
  if (len <= 0) return ssl_error("certificate encoding", nullptr, 0);
  out.cert_der.assign(der, der + len);
  OPENSSL_free(der);
  if (options.nonce) {
    POWER_ASSIGN_OR_RETURN(out.attestation,
                           get_attestation(ssl.get(), t, *options.nonce, options.api_key));
  }
  SSL_shutdown(ssl.get());
  return out;
}

}  // namespace power::attest
