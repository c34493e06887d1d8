// Where `power serve` accepts connections: `--listen` addresses.
//
//   tcp://HOST:PORT     IPv4 or IPv6 ([::1]:8080); PORT 0 picks a free port
//   unix:///path.sock   a Unix domain socket (a stale socket file nobody answers on is
//                       replaced; a live one or any other file is an error)
//   vsock://PORT        AF_VSOCK on VMADDR_CID_ANY, for a VM's host or a micro-VM's
//                       supervisor; vsock://CID:PORT binds one CID
//
// Every listener is served by the same router, with the same limits, authentication, TLS
// and drain (server.cpp starts one cpp-httplib accept loop per listener over the socket
// bound here). Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace power::server {

enum class ListenKind { kTcp, kUnix, kVsock };

struct ListenAddress {
  ListenKind kind = ListenKind::kTcp;
  std::string host;            // kTcp: numeric or name, without brackets
  int64_t port = 0;            // kTcp, kVsock (vsock ports are 32-bit unsigned)
  std::string path;            // kUnix
  uint32_t cid = 0xFFFFFFFFu;  // kVsock: VMADDR_CID_ANY unless given
  std::string uri() const;     // canonical text, as printed at start-up
};

Result<ListenAddress> parse_listen_address(const std::string& text);

// A bound, listening socket (SOCK_CLOEXEC) of a unix or vsock address. kTcp is bound by
// cpp-httplib itself (it resolves names and sets its own socket options).
Result<int> bind_listen_socket(const ListenAddress& address, int backlog = 512);

// The port a bound vsock socket got (vsock://0 lets the kernel choose); -1 on error.
int64_t vsock_bound_port(int fd);

// Whether this kernel can carry a vsock connection from this host to itself (the
// vsock_loopback transport): tests that need a round trip skip without it.
bool vsock_loopback_available();

}  // namespace power::server
