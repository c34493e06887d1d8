// `power serve --listen`: address parsing, and the same router answering on tcp, unix and
// vsock listeners of one server (docs/CONFIDENTIAL.md "Listeners").
#include "server/listeners.h"

#include <linux/vm_sockets.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http_test_util.h"
#include "server/server.h"
#include "test_util.h"

namespace power::server {
namespace {

using json = nlohmann::json;
using http_test::RawReply;

TEST(ListenAddress, ParsesEveryKindToItsCanonicalText) {
  struct Case {
    const char* in;
    ListenKind kind;
    const char* uri;
  } cases[] = {
      {"tcp://127.0.0.1:8080", ListenKind::kTcp, "tcp://127.0.0.1:8080"},
      {"tcp://0.0.0.0:0", ListenKind::kTcp, "tcp://0.0.0.0:0"},
      {"tcp://[::1]:9000", ListenKind::kTcp, "tcp://[::1]:9000"},
      {"tcp://localhost:65535", ListenKind::kTcp, "tcp://localhost:65535"},
      {"unix:///run/power/api.sock", ListenKind::kUnix, "unix:///run/power/api.sock"},
      {"vsock://5000", ListenKind::kVsock, "vsock://5000"},
      {"vsock://3:5000", ListenKind::kVsock, "vsock://3:5000"},
      {"vsock://4294967294", ListenKind::kVsock, "vsock://4294967294"},
  };
  for (const auto& c : cases) {
    auto a = parse_listen_address(c.in);
    ASSERT_TRUE(a.ok()) << c.in << ": " << a.status().to_string();
    EXPECT_EQ(a->kind, c.kind) << c.in;
    EXPECT_EQ(a->uri(), c.uri);
  }
  auto v = parse_listen_address("vsock://5000");
  EXPECT_EQ(v->cid, VMADDR_CID_ANY);
  EXPECT_EQ(parse_listen_address("tcp://[::1]:9000")->host, "::1");
}

TEST(ListenAddress, RefusesMalformedAddressesWithTheReason) {
  struct Case {
    const char* in;
    const char* why;
  } cases[] = {
      {"127.0.0.1:8080", "no scheme"},
      {"http://127.0.0.1:8080", "write tcp://"},
      {"ftp://x:1", "unknown scheme"},
      {"tcp://127.0.0.1", "no port"},
      {"tcp://:80", "no host"},
      {"tcp://127.0.0.1:65536", "0-65535"},
      {"tcp://127.0.0.1:-1", "0-65535"},
      {"tcp://127.0.0.1:80x", "0-65535"},
      {"tcp://::1:80", "[ADDR]:PORT"},
      {"tcp://[::1]80", "[ADDR]:PORT"},
      {"unix://relative.sock", "absolute path"},
      {"unix://", "absolute path"},
      {"vsock://", "not a number"},
      {"vsock://4294967295", "not a number"},
      {"vsock://x:5", "CID"},
  };
  for (const auto& c : cases) {
    auto a = parse_listen_address(c.in);
    ASSERT_FALSE(a.ok()) << c.in;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << c.in;
    EXPECT_NE(a.status().message().find(c.why), std::string::npos)
        << c.in << ": " << a.status().message();
  }
  const std::string long_path = "unix:///" + std::string(120, 'a');
  auto a = parse_listen_address(long_path);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("longer than 107 bytes"), std::string::npos);
}

TEST(ListenAddress, ConfigKeyTakesAStringOrAnArray) {
  ServerOptions o;
  ASSERT_TRUE(apply_config_json(json::parse(R"({"listen": ["unix:///tmp/a.sock",
      "tcp://127.0.0.1:0"]})"),
                                &o)
                  .ok());
  ASSERT_TRUE(apply_config_json(json::parse(R"({"listen": "vsock://7"})"), &o).ok());
  EXPECT_EQ(o.listen,
            (std::vector<std::string>{"unix:///tmp/a.sock", "tcp://127.0.0.1:0", "vsock://7"}));
  EXPECT_FALSE(apply_config_json(json::parse(R"({"listen": 8080})"), &o).ok());
  EXPECT_FALSE(apply_config_json(json::parse(R"({"listen": [1]})"), &o).ok());
}

using http_test::request_on;

int connect_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connect_vsock_local(int64_t port) {
  int fd = ::socket(AF_VSOCK, SOCK_STREAM, 0);
  sockaddr_vm addr{};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = VMADDR_CID_LOCAL;
  addr.svm_port = static_cast<unsigned>(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string temp_socket_path(const char* name) {
  return ::testing::TempDir() + "power_listen_" + std::to_string(getpid()) + "_" + name;
}

const std::string kCompletion =
    R"({"model":"stories260K-F32","prompt":"Once upon a time","max_tokens":24,"temperature":0})";

// A server with listen addresses, started with its wait() on a thread.
struct Served {
  std::unique_ptr<Server> server;
  std::thread waiter;
  ~Served() {
    if (server) server->shutdown();
    if (waiter.joinable()) waiter.join();
  }
};

Status serve(std::vector<std::string> listen, Served* out) {
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 256);
  o.listen = std::move(listen);
  o.log_requests = false;
  o.warmup = false;
  POWER_ASSIGN_OR_RETURN(out->server, Server::create(std::move(o)));
  POWER_RETURN_IF_ERROR(out->server->start());
  Server* s = out->server.get();
  out->waiter = std::thread([s] { (void)s->wait(); });
  return Status();
}

TEST(Listeners, UnixSocketAnswersTheSameAsTcpAndIsRemovedAtShutdown) {
  POWER_REQUIRE_SHARED();
  const std::string path = temp_socket_path("api.sock");
  ::unlink(path.c_str());
  {
    Served s;
    Status st = serve({"tcp://127.0.0.1:0", "unix://" + path}, &s);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const auto uris = s.server->listening();
    ASSERT_EQ(uris.size(), 2u);
    EXPECT_EQ(uris[1], "unix://" + path);
    EXPECT_EQ(uris[0], "tcp://127.0.0.1:" + std::to_string(s.server->port()));
    struct stat sb {};
    ASSERT_EQ(lstat(path.c_str(), &sb), 0);
    EXPECT_TRUE(S_ISSOCK(sb.st_mode));

    RawReply health = request_on(connect_unix(path), "GET", "/health", "");
    ASSERT_EQ(health.status, 200) << health.body;
    EXPECT_EQ(json::parse(health.body)["status"], "ok");

    RawReply over_tcp = http_test::post_raw(s.server->port(), "/v1/completions", kCompletion);
    RawReply over_unix = request_on(connect_unix(path), "POST", "/v1/completions", kCompletion);
    ASSERT_EQ(over_tcp.status, 200) << over_tcp.body;
    ASSERT_EQ(over_unix.status, 200) << over_unix.body;
    const json a = json::parse(over_tcp.body), b = json::parse(over_unix.body);
    EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
    EXPECT_EQ(b["usage"]["completion_tokens"], 24);

    // Streaming and the shared metrics: both listeners count into one /metrics.
    json streamed = json::parse(kCompletion);
    streamed["stream"] = true;
    RawReply sse = request_on(connect_unix(path), "POST", "/v1/completions", streamed.dump());
    ASSERT_EQ(sse.status, 200);
    EXPECT_NE(sse.body.find("data: [DONE]"), std::string::npos);
    RawReply bad = request_on(connect_unix(path), "POST", "/v1/completions", "{nope");
    EXPECT_EQ(bad.status, 400);
    RawReply metrics = http_test::get_raw(s.server->port(), "/metrics");
    EXPECT_NE(metrics.body.find("route=\"/v1/completions\",status=\"200\"} 3"), std::string::npos)
        << metrics.body.substr(0, 4000);
  }
  struct stat sb {};
  EXPECT_NE(lstat(path.c_str(), &sb), 0) << "the socket file outlived the server";
}

TEST(Listeners, StaleSocketIsReplacedLiveOneAndOtherFilesAreRefused) {
  POWER_REQUIRE_SHARED();
  const std::string path = temp_socket_path("stale.sock");
  ::unlink(path.c_str());
  {
    // A socket file left by a process that no longer listens.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
  }
  Served first;
  Status st = serve({"unix://" + path}, &first);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(first.server->port(), 0);
  EXPECT_EQ(request_on(connect_unix(path), "GET", "/health/live", "").status, 200);

  Served second;
  st = serve({"unix://" + path}, &second);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(st.message().find("another process is listening"), std::string::npos);
  // The first server still answers.
  EXPECT_EQ(request_on(connect_unix(path), "GET", "/health/live", "").status, 200);

  const std::string file = temp_socket_path("regular");
  std::ofstream(file) << "keep me";
  Served third;
  st = serve({"unix://" + file}, &third);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a socket"), std::string::npos);
  std::ifstream in(file);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "keep me");
  ::unlink(file.c_str());
}

TEST(Listeners, ATakenTcpPortFailsStartUpAsAWhole) {
  POWER_REQUIRE_SHARED();
  Served first;
  Status st = serve({"tcp://127.0.0.1:0"}, &first);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const std::string path = temp_socket_path("whole.sock");
  ::unlink(path.c_str());
  Served second;
  st =
      serve({"unix://" + path, "tcp://127.0.0.1:" + std::to_string(first.server->port())}, &second);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot listen"), std::string::npos);
  // The unix socket bound before the failure was closed and removed.
  struct stat sb {};
  EXPECT_NE(lstat(path.c_str(), &sb), 0);
}

TEST(Listeners, VsockBindsAndAnswersWhereTheKernelHasLoopback) {
  POWER_REQUIRE_SHARED();
  Served s;
  Status st = serve({"vsock://0"}, &s);
  if (!st.ok()) {
    // No vsock in this kernel at all: the error must say so, naming the address.
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
    EXPECT_NE(st.message().find("no vsock"), std::string::npos);
    GTEST_SKIP() << "this kernel has no AF_VSOCK: " << st.to_string();
  }
  const auto uris = s.server->listening();
  ASSERT_EQ(uris.size(), 1u);
  ASSERT_TRUE(uris[0].starts_with("vsock://")) << uris[0];
  const int64_t port = std::stoll(uris[0].substr(8));
  EXPECT_GT(port, 0);
  if (!vsock_loopback_available()) {
    GTEST_SKIP() << "bound " << uris[0]
                 << "; no vsock loopback transport here (modprobe vsock_loopback) for a "
                    "round trip";
  }
  RawReply health = request_on(connect_vsock_local(port), "GET", "/health", "");
  EXPECT_EQ(health.status, 200);
  RawReply c = request_on(connect_vsock_local(port), "POST", "/v1/completions", kCompletion);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(json::parse(c.body)["usage"]["completion_tokens"], 24);
}

}  // namespace
}  // namespace power::server
