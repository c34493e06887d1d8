// A small HTTP/1.1 server on 127.0.0.1 for the store tests, with fault injection.
//
// One thread accepts; each connection gets a thread, serves one request and closes
// ("Connection: close"). Routes are exact paths (the query is ignored). Faults: a status
// other than 200 (redirects with Location), ignoring Range, a Content-Length larger than
// the body (truncated), no Content-Length (close-delimited), dropping the connection after
// N body bytes for the first K requests, throttled bodies and delayed headers.
// Every request is logged (method, path, Range, If-Range, Authorization, status, bytes).
// Thread-safety: all public methods may be called from any thread while it runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace power::store::testing {

struct Route {
  std::string body;
  int status = 200;  // 3xx: redirect to `location`; >= 400: an error page
  std::string location;
  bool honor_range = true;
  bool send_content_length = true;
  std::optional<uint64_t> content_length;  // announced length of a 200 when not the body's
  uint64_t drop_after_bytes = UINT64_MAX;  // close after this many body bytes...
  int drop_count = 0;                      // ...for the first drop_count requests (-1: all)
  size_t chunk_bytes = 16384;
  int chunk_delay_us = 0;
  int header_delay_ms = 0;
  std::string etag;
};

struct RequestRecord {
  std::string method;
  std::string path;
  std::string range;
  std::string if_range;
  std::string authorization;
  int status = 0;
  uint64_t body_bytes_sent = 0;
};

class TestHttpServer {
 public:
  TestHttpServer();
  ~TestHttpServer();
  TestHttpServer(const TestHttpServer&) = delete;
  TestHttpServer& operator=(const TestHttpServer&) = delete;

  uint16_t port() const { return port_; }
  std::string base_url() const;
  std::string url(const std::string& path) const { return base_url() + path; }

  void set_route(const std::string& path, Route route);
  std::vector<RequestRecord> requests() const;
  std::vector<RequestRecord> requests_for(const std::string& path) const;
  // Responses with status 200 to GET on this path: whole-body downloads started.
  int full_body_gets(const std::string& path) const;
  void clear_log();

 private:
  struct RouteState {
    Route route;
    int served = 0;
  };

  void accept_loop();
  void serve(int fd);
  bool sleep_interruptible(int64_t us) const;

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::map<std::string, RouteState> routes_;
  std::vector<RequestRecord> log_;
  std::vector<std::thread> workers_;
  std::vector<int> open_fds_;
};

}  // namespace power::store::testing
