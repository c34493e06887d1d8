// Shared by the HTTP-level tests of `power serve`: a `Server` run in this process on an
// ephemeral loopback port, and one-shot requests over raw sockets (Connection: close, read to
// EOF), so each test sees exactly the bytes the server sent.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/server.h"
#include "test_util.h"

namespace power::server::http_test {

struct RawReply {
  int status = 0;    // 0 when no well-formed HTTP/1.1 answer came
  std::string head;  // status line + headers, lower-cased
  std::string body;  // de-chunked when the answer was chunked
};

struct JsonReply {
  int status = 0;
  nlohmann::json body;  // discarded (is_discarded()) when the body is not JSON
};

inline std::string dechunk(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t eol = s.find("\r\n", i);
    if (eol == std::string::npos) break;
    const size_t n = std::strtoul(s.substr(i, eol - i).c_str(), nullptr, 16);
    if (n == 0) break;
    out += s.substr(eol + 2, n);
    i = eol + 2 + n + 2;
  }
  return out;
}

// A TCP connection to 127.0.0.1:port whose reads time out after timeout_s (so a hung server
// fails a test instead of blocking it); -1 when it cannot connect.
inline int connect_loopback(int port, int timeout_s) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends all of `raw`, or as much as the peer takes before closing (it may answer 413 before
// reading everything); returns the bytes sent.
inline size_t send_all(int fd, const std::string& raw) {
  size_t sent = 0;
  while (sent < raw.size()) {
    ssize_t n = ::send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// One request (POST with a body, JSON unless `content_type` says otherwise, or GET when
// `method` says so) to `path` on 127.0.0.1:port on its own connection; `headers` are extra
// header lines ("Name: value\r\n").
// The same over an already connected socket of any kind (tcp, unix, vsock), which it closes;
// reads time out after timeout_s.
inline RawReply request_on(int fd, const std::string& method, const std::string& path,
                           const std::string& body,
                           const std::string& content_type = "application/json",
                           const std::string& headers = "", int timeout_s = 60) {
  RawReply r;
  if (fd < 0) return r;
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string raw = method + " " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                          "Content-Type: " +
                          content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n" + headers + "\r\n" + body;
  send_all(fd, raw);
  std::string in;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t he = in.find("\r\n\r\n");
  if (he == std::string::npos || !in.starts_with("HTTP/1.1 ")) return r;
  r.status = std::atoi(in.c_str() + 9);
  r.head = in.substr(0, he);
  for (auto& c : r.head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  r.body = in.substr(he + 4);
  if (r.head.find("transfer-encoding: chunked") != std::string::npos) r.body = dechunk(r.body);
  return r;
}

inline RawReply request_raw(int port, const std::string& method, const std::string& path,
                            const std::string& body,
                            const std::string& content_type = "application/json",
                            const std::string& headers = "", int timeout_s = 60) {
  return request_on(connect_loopback(port, timeout_s), method, path, body, content_type, headers,
                    timeout_s);
}

inline RawReply post_raw(int port, const std::string& path, const std::string& body) {
  return request_raw(port, "POST", path, body);
}

inline RawReply get_raw(int port, const std::string& path) {
  return request_raw(port, "GET", path, "");
}

inline JsonReply post_json(int port, const std::string& path, const std::string& body) {
  RawReply raw = post_raw(port, path, body);
  return {raw.status, nlohmann::json::parse(raw.body, nullptr, false)};
}

inline JsonReply post_chat(int port, const nlohmann::json& body) {
  return post_json(port, "/v1/chat/completions", body.dump());
}

// `power serve` options for stories260K-F32 from ../shared (one compute thread).
inline ServerOptions stories_options(const std::string& shared_dir, int64_t n_ctx) {
  ServerOptions o;
  o.models = {shared_dir + "/models/stories260K/stories260K-F32.gguf"};
  o.load.n_ctx = n_ctx;
  o.load.threads = 1;
  return o;
}

// A Server started on an ephemeral port with its wait() on a thread; stopped (drained) when
// destroyed or by stop().
class InProcessServer {
 public:
  InProcessServer() = default;
  InProcessServer(const InProcessServer&) = delete;
  InProcessServer& operator=(const InProcessServer&) = delete;
  ~InProcessServer() { stop(); }

  Status start(ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.log_requests = false;
    auto s = Server::create(std::move(o));
    if (!s.ok()) return s.status();
    server_ = std::move(*s);
    if (Status st = server_->start(); !st.ok()) return st;
    port_ = server_->port();
    thread_ = std::thread([this] { (void)server_->wait(); });
    return Status();
  }
  void stop() {
    if (server_) server_->shutdown();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// A fixture serving stories260K (../shared, n_ctx 512) for each test; without ../shared the
// server is not started and the test's POWER_REQUIRE_SHARED() skips (or fails under CI).
class StoriesServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::shared_available()) return;
    Status st = server_.start(stories_options(testing::shared_dir(), 512));
    ASSERT_TRUE(st.ok()) << st.to_string();
    port_ = server_.port();
  }
  InProcessServer server_;
  int port_ = 0;
};

}  // namespace power::server::http_test
