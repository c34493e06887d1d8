#include "server/connection_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

namespace power::server {

namespace {

// The numeric host and port of a socket address, as cpp-httplib writes them.
bool host_port(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST];
  char p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, p, sizeof p,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool socket_matches(int fd, int local_port, const std::string& remote_addr, int remote_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      !host_port(a, len, &host, &port) || port != remote_port || host != remote_addr) {
    return false;
  }
  len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      !host_port(a, len, &host, &port)) {
    return false;
  }
  return port == local_port;
}

struct CachedSocket {
  int fd = -1;
  std::string remote_addr;
  int local_port = -1, remote_port = -1;
};
thread_local CachedSocket t_cached;

int find_socket(int local_port, const std::string& remote_addr, int remote_port) {
  if (remote_port <= 0 || local_port <= 0) return -1;
  CachedSocket& c = t_cached;
  if (c.fd >= 0 && c.local_port == local_port && c.remote_port == remote_port &&
      c.remote_addr == remote_addr && socket_matches(c.fd, local_port, remote_addr, remote_port)) {
    return c.fd;
  }
  int found = -1;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      const long fd = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
      struct stat st {};
      if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      if (socket_matches(static_cast<int>(fd), local_port, remote_addr, remote_port)) {
        found = static_cast<int>(fd);
        break;
      }
    }
    closedir(d);
  }
  c = CachedSocket{found, remote_addr, local_port, remote_port};
  return found;
}

}  // namespace

ConnectionWatch::ConnectionWatch(int local_port, std::string remote_addr, int remote_port)
    : remote_addr_(std::move(remote_addr)), local_port_(local_port), remote_port_(remote_port) {
  // Now, while the request has just been read: once the peer has reset the connection its
  // socket no longer has a peer address to be found by.
  fd_ = find_socket(local_port_, remote_addr_, remote_port_);
}

int ConnectionWatch::fd() {
  if (fd_ == -2) fd_ = find_socket(local_port_, remote_addr_, remote_port_);
  return fd_;
}

bool ConnectionWatch::peer_gone() {
  const int s = fd();
  if (s < 0) return false;  // not found: nothing to watch (never cancel on a guess)
  pollfd p{s, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace power::server
