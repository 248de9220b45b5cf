// The control socket: a Unix stream socket under the run directory (dir 0700,
// socket 0600, root only, peer uid checked on every connection) speaking the
// line protocol of common/protocol.h.
//
// All connections are served from the daemon's poll loop without blocking:
// a slow, silent, oversized or half-closed client costs one slot and at most
// kClientDeadlineMs, never a stall of the daemon or of other clients.
#pragma once

#include <poll.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/protocol.h"
#include "common/result.h"

namespace dyni {

class ControlServer {
 public:
  using Handler = std::function<protocol::Response(const protocol::Request&)>;

  static constexpr int kMaxClients = 64;
  static constexpr int64_t kClientDeadlineMs = 5000;

  // Creates the run directory and socket; replaces a stale socket (the caller
  // holds the instance lock, so no live dynid owns it).
  static Result<ControlServer> listen(const std::string& run_dir, const std::string& socket_path);

  ControlServer(ControlServer&& other) noexcept;
  ControlServer& operator=(ControlServer&&) = delete;
  ~ControlServer();

  // The fds to poll: the listening socket first, then clients.
  std::vector<pollfd> poll_fds() const;
  // Serves what poll() reported; `ready` are the entries poll_fds() returned.
  void serve(const std::vector<pollfd>& ready, const Handler& handler);
  // Closes clients past their deadline; returns ms until the next deadline (or -1).
  int expire(int64_t now_mono_ms);
  bool has_pending_replies() const;
  std::size_t client_count() const { return clients_.size(); }

 private:
  struct Client {
    std::string in;
    std::string out;
    std::size_t sent = 0;
    bool replying = false;
    int64_t deadline_ms = 0;
  };

  ControlServer(int fd, std::string path) : listen_fd_(fd), path_(std::move(path)) {}
  void accept_clients();
  void on_readable(int fd, Client& client, const Handler& handler);
  void reply(int fd, Client& client, const protocol::Response& response);
  bool flush(int fd, Client& client);  // false when the client is done or broken
  void close_client(int fd);

  int listen_fd_;
  std::string path_;
  std::map<int, Client> clients_;
};

}  // namespace dyni
