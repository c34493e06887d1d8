#include "server/listeners.h"

#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/file.h"

namespace power::server {

namespace {

Status bad_address(const std::string& text, const std::string& why) {
  return Status(StatusCode::kInvalidArgument,
                fmt::format("--listen '{}': {} (tcp://HOST:PORT, unix:///path.sock, "
                            "vsock://PORT)",
                            text, why));
}

// A decimal number in [lo, hi], the whole of `s`.
bool parse_number(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty() || s.size() > 10) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

Status errno_status(const std::string& what, const std::string& uri, int err) {
  return Status(StatusCode::kIo, fmt::format("{}: {}", what, std::strerror(err)))
      .with("listen", uri);
}

}  // namespace

std::string ListenAddress::uri() const {
  switch (kind) {
    case ListenKind::kTcp:
      return host.find(':') != std::string::npos ? fmt::format("tcp://[{}]:{}", host, port)
                                                 : fmt::format("tcp://{}:{}", host, port);
    case ListenKind::kUnix:
      return "unix://" + path;
    case ListenKind::kVsock:
      return cid == VMADDR_CID_ANY ? fmt::format("vsock://{}", port)
                                   : fmt::format("vsock://{}:{}", cid, port);
  }
  return {};
}

Result<ListenAddress> parse_listen_address(const std::string& text) {
  ListenAddress a;
  const size_t sep = text.find("://");
  if (sep == std::string::npos) return bad_address(text, "no scheme");
  const std::string scheme = text.substr(0, sep);
  const std::string rest = text.substr(sep + 3);
  if (scheme == "unix") {
    a.kind = ListenKind::kUnix;
    a.path = rest;
    if (a.path.empty() || a.path[0] != '/') {
      return bad_address(text, "a unix socket needs an absolute path (unix:///run/power.sock)");
    }
    // sun_path holds 108 bytes including the terminating NUL.
    if (a.path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return bad_address(text, fmt::format("the socket path is longer than {} bytes",
                                           sizeof(sockaddr_un{}.sun_path) - 1));
    }
    if (a.path.find('\0') != std::string::npos) return bad_address(text, "NUL in the path");
    return a;
  }
  if (scheme == "vsock") {
    a.kind = ListenKind::kVsock;
    std::string port = rest;
    if (const size_t colon = rest.find(':'); colon != std::string::npos) {
      int64_t cid = 0;
      if (!parse_number(rest.substr(0, colon), 0, 0xFFFFFFFFll, &cid)) {
        return bad_address(text, "the CID is not a number");
      }
      a.cid = static_cast<uint32_t>(cid);
      port = rest.substr(colon + 1);
    }
    int64_t p = 0;
    // VMADDR_PORT_ANY (2^32 - 1) is the kernel's "choose", which port 0 already asks for.
    if (!parse_number(port, 0, 0xFFFFFFFEll, &p)) {
      return bad_address(text, "the port is not a number below 4294967295");
    }
    a.port = p;
    return a;
  }
  if (scheme == "tcp" || scheme == "http" || scheme == "https") {
    if (scheme != "tcp") {
      return bad_address(text, "write tcp:// (TLS comes from --tls-cert/--tls-key or --ra-tls)");
    }
    a.kind = ListenKind::kTcp;
    std::string port;
    if (!rest.empty() && rest[0] == '[') {
      const size_t close = rest.find(']');
      if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
        return bad_address(text, "an IPv6 address is written [ADDR]:PORT");
      }
      a.host = rest.substr(1, close - 1);
      port = rest.substr(close + 2);
    } else {
      const size_t colon = rest.rfind(':');
      if (colon == std::string::npos) return bad_address(text, "no port");
      a.host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      if (a.host.find(':') != std::string::npos) {
        return bad_address(text, "an IPv6 address is written [ADDR]:PORT");
      }
    }
    if (a.host.empty()) return bad_address(text, "no host (0.0.0.0 listens on every address)");
    int64_t p = 0;
    if (!parse_number(port, 0, 65535, &p)) return bad_address(text, "the port is not 0-65535");
    a.port = p;
    return a;
  }
  return bad_address(text, fmt::format("unknown scheme '{}'", scheme));
}

Result<int> bind_listen_socket(const ListenAddress& a, int backlog) {
  const std::string uri = a.uri();
  if (a.kind == ListenKind::kUnix) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, a.path.c_str(), a.path.size() + 1);
    struct stat st {};
    if (lstat(a.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return Status(StatusCode::kAlreadyExists,
                      "the unix socket path exists and is not a socket; not replacing it")
            .with("listen", uri);
      }
      // A socket file: live if something accepts on it, stale (a crashed server's) if not.
      UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!probe.valid()) return errno_status("socket", uri, errno);
      if (connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
        return Status(StatusCode::kAlreadyExists, "another process is listening on the socket")
            .with("listen", uri);
      }
      if (errno != ECONNREFUSED) return errno_status("cannot probe the socket path", uri, errno);
      if (unlink(a.path.c_str()) != 0)
        return errno_status("cannot remove the stale socket", uri, errno);
    }
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return errno_status("socket", uri, errno);
    if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      return errno_status("cannot bind the unix socket", uri, errno);
    }
    if (listen(fd.get(), backlog) != 0) {
      const int err = errno;
      unlink(a.path.c_str());
      return errno_status("listen", uri, err);
    }
    return fd.release();
  }
  if (a.kind == ListenKind::kVsock) {
    UniqueFd fd(socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      const int err = errno;
      if (err == EAFNOSUPPORT || err == EPROTONOSUPPORT || err == ENODEV) {
        return Status(StatusCode::kUnsupported,
                      "this kernel offers no vsock (load the vsock transport of the VM: "
                      "vmw_vsock_virtio_transport in a guest, vhost_vsock on a host)")
            .with("listen", uri);
      }
      return errno_status("socket(AF_VSOCK)", uri, err);
    }
    sockaddr_vm addr{};
    addr.svm_family = AF_VSOCK;
    addr.svm_cid = a.cid;
    addr.svm_port = a.port == 0 ? VMADDR_PORT_ANY : static_cast<unsigned>(a.port);
    if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      return errno_status("cannot bind the vsock port", uri, errno);
    }
    if (listen(fd.get(), backlog) != 0) return errno_status("listen", uri, errno);
    return fd.release();
  }
  return Status(StatusCode::kInternal, "tcp listeners are bound by the HTTP library");
}

int64_t vsock_bound_port(int fd) {
  sockaddr_vm addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  return addr.svm_port;
}

bool vsock_loopback_available() {
  ListenAddress a;
  a.kind = ListenKind::kVsock;
  auto server = bind_listen_socket(a, 4);
  if (!server.ok()) return false;
  UniqueFd listener(*server);
  const int64_t port = vsock_bound_port(listener.get());
  UniqueFd client(socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!client.valid() || port < 0) return false;
  sockaddr_vm addr{};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = VMADDR_CID_LOCAL;
  addr.svm_port = static_cast<unsigned>(port);
  if (connect(client.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return false;
    pollfd p{client.get(), POLLOUT, 0};
    if (poll(&p, 1, 1000) != 1) return false;
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(client.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return false;
  }
  return true;
}

}  // namespace power::server
