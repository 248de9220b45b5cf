// The control socket under hostile and careless clients: malformed, oversized,
// slow, half-closed, non-root and many concurrent requests. dynid must answer
// or close, keep serving others, and leak nothing.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <utility>

#include "common/protocol.h"
#include "tests/integration/dyni_host.h"

namespace dyni::test {
namespace {

using namespace std::chrono_literals;

int connect_to(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof addr.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until EOF or `timeout`; returns what arrived and whether EOF was seen.
std::pair<std::string, bool> read_all(int fd, std::chrono::milliseconds timeout) {
  std::string in;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    ssize_t n = read(fd, buf, sizeof buf);  // sockets and pipes alike
    if (n <= 0) return {in, true};
    in.append(buf, static_cast<std::size_t>(n));
  }
  return {in, false};
}

// Sends raw bytes as one client; returns the daemon's reply (closed after it).
std::string exchange(const std::string& path, const std::string& bytes, bool half_close = false) {
  int fd = connect_to(path);
  if (fd < 0) return "<connect failed>";
  send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  if (half_close) shutdown(fd, SHUT_WR);
  auto [reply, eof] = read_all(fd, 8s);
  close(fd);
  return eof ? reply : "<no close>";
}

// The sockets `pid` holds. Only sockets can leak through the control socket
// (its listener and one per client); dynid's other descriptors come and go
// with its own periodic work (a /proc directory or file read mid-scan), so a
// count of all descriptors races with that work and would fail without a leak.
std::size_t open_sockets(pid_t pid) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec))
    n += std::filesystem::read_symlink(e.path(), ec).string().starts_with("socket:[");
  return n;
}

// dynid's sockets while no client is connected: the same count twice, 50 ms
// apart (a client that just read its reply may be a moment ahead of dynid's
// close of that connection).
std::size_t idle_sockets(pid_t pid) {
  std::size_t n = open_sockets(pid);
  for (std::size_t last = n + 1; n != last;) {
    std::this_thread::sleep_for(50ms);
    last = std::exchange(n, open_sockets(pid));
  }
  return n;
}

// Waits up to 2 s for dynid's socket count to come back to `expected`, and
// returns the last count: only a leaked connection keeps it above.
std::size_t sockets_after_settling(pid_t pid, std::size_t expected) {
  std::size_t n = open_sockets(pid);
  for (int i = 0; i < 40 && n != expected; ++i) {
    std::this_thread::sleep_for(50ms);
    n = open_sockets(pid);
  }
  return n;
}

class SocketAbuse : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "dynid must run as root; run the tests as root";
    host.write_config({"nothing"});
    ASSERT_EQ(host.dyni({"-start"}).exit_code, 0);
    daemon = host.daemon_pid();
    ASSERT_GT(daemon, 0);
  }
  bool still_serving() {
    std::string reply = exchange(host.socket_path(), protocol::encode(protocol::Request{"ping", {}}));
    auto r = protocol::decode_response(reply);
    return r && r->ok;
  }
  DyniHost host;
  pid_t daemon = 0;
};

TEST_F(SocketAbuse, MalformedRequestsGetAnErrorReply) {
  std::vector<std::string> corpus = {
      "\n", "garbage\n", "{}\n", "[]\n", "null\n", "42\n", "\"str\"\n",
      "{\"version\":1}\n", "{\"version\":2,\"command\":\"status\"}\n",
      "{\"version\":1,\"command\":\"rm -rf /\"}\n", "{\"version\":1,\"command\":null}\n",
      "{\"version\":1,\"command\":\"status\",\"args\":\"x\"}\n",
      "{\"version\":1,\"command\":\"status\",\"args\":{\"brief\":\"yes\"}}\n",
      "{\"version\":1,\"command\":\"status\",\"args\":{\"brief\":null}}\n",
      "{\"version\":1e400,\"command\":\"status\"}\n",
      std::string("{\"version\":1,\"command\":\"st\0atus\"}\n", 34),
      "{\"version\":1,\"command\":\"\xff\xfe\"}\n",
      std::string(50000, '[') + "\n",
      std::string(100, '{') + "\n",
  };
  for (const auto& bad : corpus) {
    std::string reply = exchange(host.socket_path(), bad);
    auto r = protocol::decode_response(reply);
    ASSERT_TRUE(r) << "no error reply for: " << bad.substr(0, 60) << " got: " << reply;
    EXPECT_FALSE(r->ok) << bad.substr(0, 60);
    EXPECT_FALSE(r->message.empty());
  }
  EXPECT_TRUE(still_serving());
}

TEST_F(SocketAbuse, OversizedRequestIsRefused) {
  int fd = connect_to(host.socket_path());
  ASSERT_GE(fd, 0);
  std::string big(1 << 20, 'a');  // 1 MiB, no newline
  std::thread writer([&] { send(fd, big.data(), big.size(), MSG_NOSIGNAL); });
  auto [reply, eof] = read_all(fd, 8s);
  shutdown(fd, SHUT_RDWR);
  writer.join();
  close(fd);
  EXPECT_TRUE(eof);
  auto r = protocol::decode_response(reply);
  ASSERT_TRUE(r) << reply;
  EXPECT_EQ(r->message, "request too large");
  EXPECT_TRUE(still_serving());
}

TEST_F(SocketAbuse, HalfClosedRequestsAreAnsweredOrClosed) {
  // A full request without its newline, then EOF: answered.
  std::string reply = exchange(host.socket_path(), R"({"version":1,"command":"ping"})", true);
  auto r = protocol::decode_response(reply);
  ASSERT_TRUE(r) << reply;
  EXPECT_TRUE(r->ok);
  // Half a request, then EOF: an error reply.
  reply = exchange(host.socket_path(), R"({"version":1,"comm)", true);
  r = protocol::decode_response(reply);
  ASSERT_TRUE(r) << reply;
  EXPECT_FALSE(r->ok);
  // Nothing, then EOF: closed.
  EXPECT_EQ(exchange(host.socket_path(), "", true), "");
  EXPECT_TRUE(still_serving());
}

TEST_F(SocketAbuse, SlowAndSilentClientsDoNotStallOthers) {
  std::size_t sockets_before = idle_sockets(daemon);
  std::vector<int> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(connect_to(host.socket_path()));
  int trickle = connect_to(host.socket_path());
  send(trickle, "{\"vers", 6, MSG_NOSIGNAL);
  auto t0 = std::chrono::steady_clock::now();
  RunResult status = host.dyni({"-status"});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "status stalled by silent clients";
  // The daemon drops idle clients after its deadline (5 s).
  for (int fd : silent) {
    auto [reply, eof] = read_all(fd, 8s);
    EXPECT_TRUE(eof) << "silent client never closed";
    close(fd);
  }
  read_all(trickle, 8s);
  close(trickle);
  EXPECT_EQ(sockets_after_settling(daemon, sockets_before), sockets_before)
      << "dynid leaked sockets";
}

TEST_F(SocketAbuse, ManyConcurrentClients) {
  std::size_t sockets_before = idle_sockets(daemon);
  std::atomic<int> answered{0}, refused_busy{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 80; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < 15; ++i) {
        auto r = protocol::decode_response(
            exchange(host.socket_path(), protocol::encode(protocol::Request{"status", {}})));
        if (r && r->ok) ++answered;
        else if (r && r->message.find("busy") != std::string::npos) ++refused_busy;
        else ++failed;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(answered + refused_busy, 80 * 15);
  EXPECT_GT(answered, 80 * 15 / 2);
  EXPECT_TRUE(still_serving());
  EXPECT_EQ(sockets_after_settling(daemon, sockets_before), sockets_before)
      << "dynid leaked sockets";
}

TEST_F(SocketAbuse, NonRootPeerIsRefusedByTheDaemonItself) {
  // Open the directory and socket to everyone so only the peer check remains.
  chmod(host.run_dir().c_str(), 0755);
  chmod(host.socket_path().c_str(), 0666);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t child = fork();
  if (child == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(2);
    std::string reply = exchange(host.socket_path(), protocol::encode(protocol::Request{"stop", {}}));
    ssize_t n = write(pipe_fds[1], reply.data(), reply.size());
    _exit(n >= 0 ? 0 : 1);
  }
  close(pipe_fds[1]);
  auto [reply, eof] = read_all(pipe_fds[0], 10s);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  auto r = protocol::decode_response(reply);
  ASSERT_TRUE(r) << "reply: " << reply << " child status " << status;
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->message, "permission denied: dynid answers only root");
  EXPECT_TRUE(still_serving()) << "a non-root 'stop' must not stop dynid";
  EXPECT_NE(host.log().find("DYNID-WARN control socket: refused a connection from uid 65534"),
            std::string::npos);
}

}  // namespace
}  // namespace dyni::test
