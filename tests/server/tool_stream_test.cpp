// The streamed tool-call filter (server/tool_stream.h) and the connection watch
// (server/connection_watch.h), without a server: expected outputs follow from the rules in
// tool_stream.h applied by hand, and from what TCP does when a peer closes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "server/connection_watch.h"
#include "server/tool_stream.h"

namespace power::server {
namespace {

Completion with_call(std::string content) {
  Completion c;
  c.text = std::move(content);
  c.tool_calls.push_back({"call_0", "lookup", R"({"q":"x"})"});
  return c;
}

TEST(ToolStreamFilter, HermesOpenerMidReplyIsHeldFromWhereItStarts) {
  ToolStreamFilter f(/*forced=*/false);
  EXPECT_EQ(f.push("Let me check. "), "Let me check. ");
  // "<tool" may still become "<tool_call>": held.
  EXPECT_EQ(f.push("<tool"), "");
  EXPECT_FALSE(f.holding());
  EXPECT_EQ(f.push("_call>\n{\"name\": \"lookup\", "), "");
  EXPECT_TRUE(f.holding());
  EXPECT_EQ(f.push("\"arguments\": {\"q\": \"x\"}}\n</tool_call>"), "");
  // The parsed content is what was already sent: nothing more goes out as content.
  EXPECT_EQ(f.finish(with_call("Let me check.")), "");
}

TEST(ToolStreamFilter, APrefixThatDoesNotBecomeAnOpenerIsReleased) {
  ToolStreamFilter f(false);
  EXPECT_EQ(f.push("a <tool"), "a ");
  EXPECT_EQ(f.push("s are here"), "<tools are here");
  EXPECT_EQ(f.push(" >>"), " ");  // ">>" may begin ">>>"
  EXPECT_EQ(f.push(" ok"), ">> ok");
  Completion plain;
  plain.text = "a <tools are here >> ok";
  EXPECT_EQ(f.finish(plain), "");
}

TEST(ToolStreamFilter, ReplyStartingWithJsonIsHeldAndFlushedWhenNoCallParses) {
  ToolStreamFilter f(false);
  EXPECT_EQ(f.push("  "), "  ");
  EXPECT_EQ(f.push("{\"a\""), "");
  EXPECT_TRUE(f.holding());
  EXPECT_EQ(f.push(": 1} and more"), "");
  Completion plain;  // no call parsed: the held text is content after all
  plain.text = "  {\"a\": 1} and more";
  EXPECT_EQ(f.finish(plain), "{\"a\": 1} and more");
}

TEST(ToolStreamFilter, JsonLaterInTheReplyIsContent) {
  ToolStreamFilter f(false);
  EXPECT_EQ(f.push("Here: "), "Here: ");
  EXPECT_EQ(f.push("{\"a\": 1}"), "{\"a\": 1}");
}

TEST(ToolStreamFilter, ForcedHoldsEverythingAndSendsContentOutsideTheCall) {
  ToolStreamFilter f(/*forced=*/true);
  EXPECT_EQ(f.push("Sure. "), "");
  EXPECT_EQ(f.push("<tool_call>{...}</tool_call>"), "");
  EXPECT_EQ(f.finish(with_call("Sure.")), "Sure.");
}

TEST(ToolStreamFilter, ContentAfterTheCallGoesOutAtTheEnd) {
  ToolStreamFilter f(false);
  EXPECT_EQ(f.push("Checking."), "Checking.");
  EXPECT_EQ(f.push("<tool_call>{}</tool_call> Done."), "");
  EXPECT_EQ(f.finish(with_call("Checking. Done.")), " Done.");
}

// A loopback TCP pair: the accepted side is what the server watches.
struct TcpPair {
  int listener = -1, client = -1, server = -1;
  int server_port = 0, client_port = 0;
  TcpPair() {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    server_port = ntohs(a.sin_port);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    server = ::accept(listener, nullptr, nullptr);
    sockaddr_in c{};
    len = sizeof c;
    ::getsockname(client, reinterpret_cast<sockaddr*>(&c), &len);
    client_port = ntohs(c.sin_port);
  }
  ~TcpPair() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

TEST(ConnectionWatch, FindsTheSocketAndSeesThePeerClose) {
  TcpPair p;
  ASSERT_GE(p.server, 0);
  ConnectionWatch w(p.server_port, "127.0.0.1", p.client_port);
  EXPECT_EQ(w.fd(), p.server);
  EXPECT_FALSE(w.peer_gone());
  // Data from the client (a pipelined request) is not a close.
  ASSERT_EQ(::send(p.client, "x", 1, MSG_NOSIGNAL), 1);
  EXPECT_FALSE(w.peer_gone());
  ::close(p.client);
  p.client = -1;
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = w.peer_gone();
    if (!gone) ::usleep(10000);
  }
  EXPECT_TRUE(gone);
}

TEST(ConnectionWatch, UnknownConnectionIsNeverReportedGone) {
  TcpPair p;
  ASSERT_GE(p.server, 0);
  ConnectionWatch w(p.server_port, "127.0.0.1", p.client_port + 1 == 65536 ? 1 : p.client_port + 1);
  EXPECT_EQ(w.fd(), -1);
  EXPECT_FALSE(w.peer_gone());
}

}  // namespace
}  // namespace power::server
