// A minimal RA-TLS server for tests: plain OpenSSL over a unix or TCP listening socket,
// presenting an RaTlsIdentity and answering GET /v1/attestation?nonce=HEX the way `power serve
// --ra-tls` does (RaTlsIdentity::fresh_evidence), one connection at a time on its own thread.
// It exists so the attest tests need neither the server library nor a model.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "attest/ra_tls.h"

namespace power::attest::testing {

class RaTlsTestServer {
 public:
  // unix_path empty: TCP on 127.0.0.1 with a kernel-chosen port().
  RaTlsTestServer(const RaTlsIdentity& identity, const std::string& unix_path)
      : identity_(identity) {
    // A client that hangs up after the handshake must not kill the test process.
    ::signal(SIGPIPE, SIG_IGN);
    if (!unix_path.empty()) {
      fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, unix_path.c_str(), sizeof(addr.sun_path) - 1);
      ::unlink(unix_path.c_str());
      ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    } else {
      fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      socklen_t len = sizeof(addr);
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
      port_ = ntohs(addr.sin_port);
    }
    ok_ = ok_ && ::listen(fd_, 8) == 0;
    ctx_ = SSL_CTX_new(TLS_server_method());
    ok_ = ok_ && ctx_ != nullptr && SSL_CTX_use_certificate(ctx_, identity.certificate()) == 1 &&
          SSL_CTX_use_PrivateKey(ctx_, identity.private_key()) == 1;
    if (ok_) thread_ = std::thread([this] { serve(); });
  }
  ~RaTlsTestServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
    SSL_CTX_free(ctx_);
  }
  RaTlsTestServer(const RaTlsTestServer&) = delete;
  RaTlsTestServer& operator=(const RaTlsTestServer&) = delete;

  bool ok() const { return ok_; }
  int port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      ++connections_;
      SSL* ssl = SSL_new(ctx_);
      SSL_set_fd(ssl, c);
      if (SSL_accept(ssl) == 1) answer(ssl);
      SSL_shutdown(ssl);
      SSL_free(ssl);
      ::close(c);
    }
  }

  void answer(SSL* ssl) {
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      const int n = SSL_read(ssl, buf, sizeof(buf));
      if (n <= 0) return;  // a client that only wanted the certificate
      request.append(buf, static_cast<size_t>(n));
    }
    int status = 200;
    nlohmann::json body;
    const std::string prefix = "GET /v1/attestation?nonce=";
    if (request.rfind(prefix, 0) != 0) {
      status = 404;
      body = {{"error", "not found"}};
    } else {
      const std::string hex =
          request.substr(prefix.size(), request.find(' ', prefix.size()) - prefix.size());
      auto nonce = parse_ra_tls_nonce(hex);
      auto answer =
          nonce.ok() ? identity_.fresh_evidence(*nonce) : Result<nlohmann::json>(nonce.status());
      if (answer.ok()) {
        body = *answer;
      } else {
        status = 400;
        body = {{"error", answer.status().to_string()}};
      }
    }
    const std::string text = body.dump();
    const std::string response =
        "HTTP/1.1 " + std::to_string(status) +
        " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) +
        "\r\nConnection: close\r\n\r\n" + text;
    SSL_write(ssl, response.data(), static_cast<int>(response.size()));
  }

  const RaTlsIdentity& identity_;
  int fd_ = -1;
  int port_ = 0;
  bool ok_ = false;
  SSL_CTX* ctx_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace power::attest::testing
