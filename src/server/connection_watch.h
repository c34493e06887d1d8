// Whether the client of an HTTP request has gone away, checked while the request waits
// (queued, or generating without output) so that its work can be cancelled.
//
// cpp-httplib 0.11 does not hand the connection's socket to handlers, so the socket is found
// once per connection by its addresses (the server's listening port and the request's remote
// address and port against getsockname / getpeername of this process's sockets, found in
// /proc/self/fd) and cached for the thread, which serves that connection until it closes. The check
// itself is one poll(POLLRDHUP, timeout 0): the peer closed or reset the connection (a client that
// has only shut down its sending side counts as gone too: HTTP clients do not do that while they
// wait for an answer). With TLS the close_notify record is data, but the FIN that follows it
// still raises POLLRDHUP.
// Thread-safety: one watch per request, on the thread that serves the connection.
#pragma once

#include <string>

namespace power::server {

class ConnectionWatch {
 public:
  // Finds the socket (construct it while handling the request, when the peer is surely
  // still connected).
  ConnectionWatch(int local_port, std::string remote_addr, int remote_port);
  // True once the peer has closed or reset the connection.
  bool peer_gone();
  // The socket found (-1: none, e.g. the connection is already closed); for tests.
  int fd();

 private:
  std::string remote_addr_;
  int local_port_ = -1, remote_port_ = -1;
  int fd_ = -2;  // -2: not looked up yet
};

}  // namespace power::server
