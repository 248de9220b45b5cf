// Blocking one-shot client of dynid's control socket, with a deadline.
#include "dyni-cli/control_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>

#include "common/errno_text.h"

namespace dyni::cli {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  int get() const { return fd_; }
 private:
  int fd_;
};

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// Waits for `events` on fd until `deadline`; false on timeout.
bool wait_for(int fd, short events, int64_t deadline) {
  for (;;) {
    int left = static_cast<int>(deadline - now_ms());
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, left);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

}  // namespace

Result<CallResult> call(const std::string& socket_path, const protocol::Request& request,
                        int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) return fail("socket path too long");
  socket_path.copy(addr.sun_path, socket_path.size());
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return fail(sys_error("socket"));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == ENOENT || errno == ECONNREFUSED) return CallResult{false, {}};
    if (errno != EINPROGRESS && errno != EAGAIN)
      return fail(sys_error("cannot connect to " + socket_path));
  }
  int64_t deadline = now_ms() + timeout_ms;
  std::string out = protocol::encode(request);
  for (std::size_t sent = 0; sent < out.size();) {
    if (!wait_for(fd.get(), POLLOUT, deadline)) return fail("dynid did not answer in time");
    ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return fail(sys_error("send to dynid"));
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  std::string in;
  char buf[65536];
  while (in.find('\n') == std::string::npos) {
    if (!wait_for(fd.get(), POLLIN, deadline)) return fail("dynid did not answer in time");
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n == 0) return fail("dynid closed the connection without an answer");
    if (n < 0 && errno != EAGAIN && errno != EINTR) return fail(sys_error("receive from dynid"));
    if (n > 0) in.append(buf, static_cast<std::size_t>(n));
    if (in.size() > protocol::kMaxResponseBytes) return fail("dynid's answer is too large");
  }
  auto response = protocol::decode_response(in.substr(0, in.find('\n')));
  if (!response) return std::unexpected(response.error());
  return CallResult{true, *response};
}

}  // namespace dyni::cli
