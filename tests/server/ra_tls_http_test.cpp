// power serve --ra-tls (docs/CONFIDENTIAL.md "Attestation"): every listener serves the attested
// certificate, /v1/attestation answers fresh evidence bound to the TLS key and a nonce, and a
// machine without a TEE refuses the attested modes at start-up.
#include <unistd.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "attest/ra_tls_client.h"
#include "attest/tee_evidence.h"
#include "http_test_util.h"
#include "server/server.h"
#include "test_util.h"

namespace power::server {
namespace {

struct Served {
  std::unique_ptr<Server> server;
  std::thread waiter;
  ~Served() {
    if (server) server->shutdown();
    if (waiter.joinable()) waiter.join();
  }
};

Status serve(ServerOptions o, Served* out) {
  o.log_requests = false;
  o.warmup = false;
  POWER_ASSIGN_OR_RETURN(out->server, Server::create(std::move(o)));
  POWER_RETURN_IF_ERROR(out->server->start());
  Server* s = out->server.get();
  out->waiter = std::thread([s] { (void)s->wait(); });
  return Status();
}

std::string socket_path(const char* name) {
  return ::testing::TempDir() + "power_ratls_" + std::to_string(getpid()) + "_" + name;
}

TEST(RaTlsServe, DevelopmentCertificateOnEveryListenerRefusedUnlessAllowed) {
  POWER_REQUIRE_SHARED();
  const std::string path = socket_path("dev.sock");
  ::unlink(path.c_str());
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 256);
  o.ra_tls = "development";
  o.listen = {"unix://" + path, "tcp://127.0.0.1:0"};
  Served s;
  Status st = serve(o, &s);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(s.server->tls());

  attest::RaTlsFetchOptions fetch;
  fetch.nonce = std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8};
  auto over_unix = attest::fetch_peer_certificate("unix://" + path, fetch);
  ASSERT_TRUE(over_unix.ok()) << over_unix.status().to_string();
  auto over_tcp = attest::fetch_peer_certificate(
      "https://127.0.0.1:" + std::to_string(s.server->port()), fetch);
  ASSERT_TRUE(over_tcp.ok()) << over_tcp.status().to_string();
  // One identity: the same certificate on both listeners.
  EXPECT_EQ(over_unix->cert_der, over_tcp->cert_der);

  attest::RaTlsVerifyOptions strict;
  auto refused = attest::verify_ra_tls_certificate(over_unix->cert_der, strict);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.failed_check, "development");

  attest::RaTlsVerifyOptions dev;
  dev.allow_development = true;
  auto accepted = attest::verify_ra_tls_certificate(over_unix->cert_der, dev);
  EXPECT_TRUE(accepted.ok()) << accepted.status.to_string();
  ASSERT_TRUE(over_unix->attestation.has_value());
  auto fresh = attest::verify_attestation_response(*over_unix->attestation, over_unix->cert_der,
                                                   *fetch.nonce, dev);
  EXPECT_TRUE(fresh.ok()) << fresh.status.to_string();
  // The answer bound to one nonce does not pass for another.
  const std::vector<uint8_t> other = {9, 9, 9, 9};
  auto replayed =
      attest::verify_attestation_response(*over_unix->attestation, over_unix->cert_der, other, dev);
  EXPECT_FALSE(replayed.ok());
  EXPECT_EQ(replayed.failed_check, "nonce_binding");
}

TEST(RaTlsServe, AttestationRouteWithoutRaTlsAndBadNonces) {
  POWER_REQUIRE_SHARED();
  {
    http_test::InProcessServer plain;
    ASSERT_TRUE(plain.start(http_test::stories_options(testing::shared_dir(), 256)).ok());
    auto r = http_test::get_raw(plain.port(), "/v1/attestation?nonce=00");
    EXPECT_EQ(r.status, 404);
    EXPECT_NE(r.body.find("attestation_unavailable"), std::string::npos);
  }
  // Open without an API key (a client checks before it trusts the server with one), and
  // nonces are bounded hex.
  const std::string path = socket_path("nonce.sock");
  ::unlink(path.c_str());
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 256);
  o.ra_tls = "development";
  o.listen = {"unix://" + path};
  const std::string keys = ::testing::TempDir() + "power_ratls_keys_" + std::to_string(getpid());
  FILE* f = std::fopen(keys.c_str(), "w");
  std::fputs("sk-test-key\n", f);
  std::fclose(f);
  o.api_key_file = keys;
  Served s;
  Status st = serve(o, &s);
  ASSERT_TRUE(st.ok()) << st.to_string();
  attest::RaTlsFetchOptions fetch;
  fetch.nonce = std::vector<uint8_t>(64, 0xab);
  auto peer = attest::fetch_peer_certificate("unix://" + path, fetch);
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  ASSERT_TRUE(peer->attestation.has_value());
  std::string hex;
  for (int i = 0; i < 64; ++i) hex += "ab";
  EXPECT_EQ((*peer->attestation)["nonce"], hex);
  fetch.nonce = std::vector<uint8_t>(65, 1);
  auto too_long = attest::fetch_peer_certificate("unix://" + path, fetch);
  EXPECT_FALSE(too_long.ok());
  std::remove(keys.c_str());
}

TEST(RaTlsServe, AttestedModesNeedATeeAndExcludeACertificate) {
  POWER_REQUIRE_SHARED();
  ServerOptions o = http_test::stories_options(testing::shared_dir(), 256);
  o.listen = {"tcp://127.0.0.1:0"};
  o.ra_tls = "development";
  o.tls_cert = "cert.pem";
  o.tls_key = "key.pem";
  auto both = Server::create(o);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("drop --tls-cert"), std::string::npos);

  o.tls_cert.clear();
  o.tls_key.clear();
  o.ra_tls = "bogus";
  EXPECT_FALSE(Server::create(o).ok());

  if (attest::detect_tee({}).ok()) GTEST_SKIP() << "this machine has a TEE";
  for (const char* mode : {"auto", "sev-snp", "tdx"}) {
    o.ra_tls = mode;
    auto r = Server::create(o);
    ASSERT_FALSE(r.ok()) << mode;
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << r.status().to_string();
    EXPECT_NE(r.status().message().find("--ra-tls"), std::string::npos);
  }
}

}  // namespace
}  // namespace power::server
