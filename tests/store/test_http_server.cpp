#include "test_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace power::store::testing {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 307:
      return "Temporary Redirect";
    case 404:
      return "Not Found";
    case 416:
      return "Range Not Satisfiable";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// "bytes=N-" or "bytes=N-M": the first and last byte, or nullopt when unparsable.
std::optional<std::pair<uint64_t, std::optional<uint64_t>>> parse_range(const std::string& v) {
  if (v.rfind("bytes=", 0) != 0) return std::nullopt;
  std::string spec = v.substr(6);
  auto dash = spec.find('-');
  if (dash == std::string::npos || dash == 0) return std::nullopt;
  try {
    uint64_t first = std::stoull(spec.substr(0, dash));
    std::optional<uint64_t> last;
    if (dash + 1 < spec.size()) last = std::stoull(spec.substr(dash + 1));
    return std::make_pair(first, last);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace

TestHttpServer::TestHttpServer() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("socket failed");
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 128) != 0) {
    throw std::runtime_error("bind/listen failed");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TestHttpServer::~TestHttpServer() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
  ::close(listen_fd_);
}

std::string TestHttpServer::base_url() const {
  return fmt::format("http://127.0.0.1:{}", port_);
}

void TestHttpServer::set_route(const std::string& path, Route route) {
  std::lock_guard<std::mutex> lock(mu_);
  routes_[path] = RouteState{std::move(route), 0};
}

std::vector<RequestRecord> TestHttpServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

std::vector<RequestRecord> TestHttpServer::requests_for(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RequestRecord> out;
  for (const auto& r : log_) {
    if (r.path == path) out.push_back(r);
  }
  return out;
}

int TestHttpServer::full_body_gets(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::count_if(log_.begin(), log_.end(), [&](const RequestRecord& r) {
    return r.path == path && r.method == "GET" && r.status == 200;
  }));
}

void TestHttpServer::clear_log() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
}

bool TestHttpServer::sleep_interruptible(int64_t us) const {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
    if (stopping_) return false;
    auto left = until - std::chrono::steady_clock::now();
    std::this_thread::sleep_for(
        std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(20)));
  }
  return !stopping_;
}

void TestHttpServer::accept_loop() {
  while (!stopping_) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    open_fds_.push_back(fd);
    workers_.emplace_back([this, fd] {
      serve(fd);
      std::lock_guard<std::mutex> l(mu_);
      open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
      ::close(fd);
    });
  }
}

void TestHttpServer::serve(int fd) {
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 65536) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  RequestRecord rec;
  std::map<std::string, std::string> headers;
  {
    size_t eol = req.find("\r\n");
    std::string line = req.substr(0, eol);
    size_t sp1 = line.find(' ');
    size_t sp2 = line.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) return;
    rec.method = line.substr(0, sp1);
    rec.path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    rec.path = rec.path.substr(0, rec.path.find('?'));
    size_t pos = eol + 2;
    while (pos < req.size()) {
      size_t e = req.find("\r\n", pos);
      if (e == std::string::npos || e == pos) break;
      std::string h = req.substr(pos, e - pos);
      size_t colon = h.find(':');
      if (colon != std::string::npos) {
        std::string v = h.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.erase(0, 1);
        headers[lower(h.substr(0, colon))] = v;
      }
      pos = e + 2;
    }
  }
  rec.range = headers["range"];
  rec.if_range = headers["if-range"];
  rec.authorization = headers["authorization"];

  Route route;
  int served_index = 0;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = routes_.find(rec.path);
    if (it != routes_.end()) {
      found = true;
      route = it->second.route;
      served_index = it->second.served++;
    }
  }
  // Logged before the body is sent, so a client that finished reading always finds it.
  size_t log_index = 0;
  auto log_it = [&](int status, uint64_t sent) {
    rec.status = status;
    rec.body_bytes_sent = sent;
    std::lock_guard<std::mutex> lock(mu_);
    log_index = log_.size();
    log_.push_back(rec);
  };
  if (!found) {
    std::string r =
        "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\n"
        "not found";
    log_it(404, 0);
    send_all(fd, r.data(), r.size());
    return;
  }
  if (route.header_delay_ms > 0 && !sleep_interruptible(int64_t{route.header_delay_ms} * 1000)) {
    return;
  }
  if (route.status >= 300 && route.status < 400) {
    std::string r = fmt::format(
        "HTTP/1.1 {} {}\r\nLocation: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        route.status, reason(route.status), route.location);
    log_it(route.status, 0);
    send_all(fd, r.data(), r.size());
    return;
  }
  if (route.status >= 400) {
    std::string r =
        fmt::format("HTTP/1.1 {} {}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nerror",
                    route.status, reason(route.status));
    log_it(route.status, 0);
    send_all(fd, r.data(), r.size());
    return;
  }

  const uint64_t size = route.body.size();
  int status = 200;
  uint64_t first = 0;
  uint64_t end = size;  // one past the last byte sent
  std::string extra;
  auto range = parse_range(rec.range);
  bool range_applies = route.honor_range && range.has_value() &&
                       (rec.if_range.empty() || rec.if_range == route.etag);
  if (range_applies) {
    if (range->first >= size) {
      std::string r = fmt::format(
          "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{}\r\nContent-Length: "
          "0\r\nConnection: close\r\n\r\n",
          size);
      log_it(416, 0);
      send_all(fd, r.data(), r.size());
      return;
    }
    status = 206;
    first = range->first;
    if (range->second && *range->second + 1 < size) end = *range->second + 1;
    extra += fmt::format("Content-Range: bytes {}-{}/{}\r\n", first, end - 1, size);
  }
  if (route.send_content_length) {
    uint64_t announced = end - first;
    if (status == 200 && route.content_length) announced = *route.content_length;
    extra += fmt::format("Content-Length: {}\r\n", announced);
  }
  if (!route.etag.empty()) extra += fmt::format("ETag: {}\r\n", route.etag);
  std::string head =
      fmt::format("HTTP/1.1 {} {}\r\n{}Accept-Ranges: bytes\r\nConnection: close\r\n\r\n", status,
                  reason(status), extra);
  uint64_t sent = 0;
  log_it(status, 0);
  if (!send_all(fd, head.data(), head.size())) return;
  const bool drop = route.drop_count < 0 || served_index < route.drop_count;
  const uint64_t limit =
      drop ? std::min<uint64_t>(route.drop_after_bytes, end - first) : end - first;
  while (sent < limit && !stopping_) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(route.chunk_bytes, limit - sent));
    if (!send_all(fd, route.body.data() + first + sent, n)) break;
    sent += n;
    if (route.chunk_delay_us > 0 && sent < limit && !sleep_interruptible(route.chunk_delay_us)) {
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_[log_index].body_bytes_sent = sent;
  }
  // Closing (by the caller) ends the body; a drop or a short body leaves it truncated.
  ::shutdown(fd, SHUT_WR);
}

}  // namespace power::store::testing
