// Non-blocking control-socket server driven by the daemon's poll loop.
#include "dynid/control_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/errno_text.h"
#include "common/file_io.h"
#include "common/log.h"
#include "dynid/target_table.h"

namespace dyni {
namespace {

// The run directory must be ours alone: a directory someone else created or
// can write could let them swap the socket.
Status secure_run_dir(const std::string& run_dir) {
  if (auto made = ensure_dir(run_dir, 0700); !made) return made;
  struct stat st {};
  if (::lstat(run_dir.c_str(), &st) != 0) return fail(sys_error("cannot stat " + run_dir));
  if (st.st_uid != ::geteuid())
    return fail(run_dir + " is owned by uid " + std::to_string(st.st_uid) + ", not by dynid's user");
  return ok();
}

Result<int> bind_socket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return fail("socket path too long: " + path);
  path.copy(addr.sun_path, path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(sys_error("socket"));
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    log::warn("removing stale control socket {} left by an earlier dynid", path);
    ::unlink(path.c_str());
  }
  mode_t old_mask = ::umask(0177);  // socket is created 0600
  int bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::umask(old_mask);
  if (bound != 0 || ::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 128) != 0) {
    err = bound != 0 ? err : errno;
    ::close(fd);
    return fail(sys_error("cannot listen on " + path, err));
  }
  return fd;
}

uid_t peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return static_cast<uid_t>(-1);
  return cred.uid;
}

}  // namespace

Result<ControlServer> ControlServer::listen(const std::string& run_dir,
                                            const std::string& socket_path) {
  if (auto dir = secure_run_dir(run_dir); !dir) return std::unexpected(dir.error());
  auto fd = bind_socket(socket_path);
  if (!fd) return std::unexpected(fd.error());
  return ControlServer(*fd, socket_path);
}

ControlServer::ControlServer(ControlServer&& other) noexcept
    : listen_fd_(other.listen_fd_), path_(std::move(other.path_)),
      clients_(std::move(other.clients_)) {
  other.listen_fd_ = -1;
  other.clients_.clear();
}

ControlServer::~ControlServer() {
  for (auto& [fd, client] : clients_) ::close(fd);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
}

std::vector<pollfd> ControlServer::poll_fds() const {
  std::vector<pollfd> fds;
  fds.push_back({listen_fd_, POLLIN, 0});
  for (const auto& [fd, client] : clients_)
    fds.push_back({fd, static_cast<short>(client.replying ? POLLOUT : POLLIN), 0});
  return fds;
}

void ControlServer::serve(const std::vector<pollfd>& ready, const Handler& handler) {
  for (const pollfd& p : ready) {
    if (!p.revents || p.fd == listen_fd_) continue;
    auto it = clients_.find(p.fd);
    if (it == clients_.end()) continue;
    if (it->second.replying) {
      if (!flush(p.fd, it->second)) close_client(p.fd);
    } else {
      on_readable(p.fd, it->second, handler);
    }
  }
  if (!ready.empty() && ready[0].revents) accept_clients();
}

void ControlServer::accept_clients() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: no more pending; other errors: try next poll
    auto [it, inserted] = clients_.emplace(fd, Client{});
    it->second.deadline_ms = now_mono_ms() + kClientDeadlineMs;
    if (uid_t uid = peer_uid(fd); uid != 0) {
      log::warn("control socket: refused a connection from uid {}", uid);
      reply(fd, it->second, protocol::error_response("permission denied: dynid answers only root"));
    } else if (clients_.size() > kMaxClients) {
      reply(fd, it->second, protocol::error_response("dynid is busy: too many clients, try again"));
    }
  }
}

void ControlServer::on_readable(int fd, Client& client, const Handler& handler) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    bool eof = n <= 0;
    if (!eof) client.in.append(buf, static_cast<std::size_t>(n));
    std::size_t newline = client.in.find('\n');
    if (newline == std::string::npos && client.in.size() > protocol::kMaxRequestBytes)
      return reply(fd, client, protocol::error_response("request too large"));
    if (newline == std::string::npos && !eof) continue;
    if (newline == std::string::npos && client.in.empty()) return close_client(fd);
    // A full line, or what a half-closed client sent before its EOF.
    auto request = protocol::decode_request(client.in.substr(0, newline));
    return reply(fd, client, request ? handler(*request)
                                     : protocol::error_response(request.error().message()));
  }
}

void ControlServer::reply(int fd, Client& client, const protocol::Response& response) {
  client.out = protocol::encode(response);
  client.sent = 0;
  client.replying = true;
  client.in.clear();
  if (!flush(fd, client)) close_client(fd);
}

bool ControlServer::flush(int fd, Client& client) {
  while (client.sent < client.out.size()) {
    ssize_t n = ::send(fd, client.out.data() + client.sent, client.out.size() - client.sent,
                       MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    client.sent += static_cast<std::size_t>(n);
  }
  return false;  // all sent: the exchange is over
}

void ControlServer::close_client(int fd) {
  // Drain what the client sent but we did not read (bounded), so closing does
  // not reset the connection before the client has read our reply.
  char buf[4096];
  for (int i = 0; i < 16 && ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0; ++i) {}
  ::close(fd);
  clients_.erase(fd);
}

int ControlServer::expire(int64_t now) {
  int64_t next = -1;
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (it->second.deadline_ms <= now) {
      ::close(it->first);
      it = clients_.erase(it);
      continue;
    }
    int64_t left = it->second.deadline_ms - now;
    if (next < 0 || left < next) next = left;
    ++it;
  }
  return static_cast<int>(next);
}

bool ControlServer::has_pending_replies() const {
  for (const auto& [fd, client] : clients_)
    if (client.replying) return true;
  return false;
}

}  // namespace dyni
