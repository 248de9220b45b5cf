// The proc connector: a netlink socket that the kernel sends a message per
// fork, exec and exit of every process on the host.
#include "dynid/exec_watch.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/errno_text.h"

namespace dyni {

namespace {

// Room for the events of a burst of forks (a pool started, pgbench -C)
// between two scans; set past rmem_max with SO_RCVBUFFORCE (root).
constexpr int kReceiveBuffer = 4 << 20;

Status listen(int fd) {
  alignas(nlmsghdr) std::array<uint8_t, NLMSG_LENGTH(sizeof(cn_msg) + sizeof(proc_cn_mcast_op))> request{};
  auto* header = reinterpret_cast<nlmsghdr*>(request.data());
  header->nlmsg_len = request.size();
  header->nlmsg_type = NLMSG_DONE;
  header->nlmsg_pid = static_cast<__u32>(::getpid());
  auto* message = static_cast<cn_msg*>(NLMSG_DATA(header));
  message->id = {CN_IDX_PROC, CN_VAL_PROC};
  message->len = sizeof(proc_cn_mcast_op);
  const proc_cn_mcast_op op = PROC_CN_MCAST_LISTEN;
  std::memcpy(message->data, &op, sizeof(op));
  if (::send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size()))
    return fail(fmt::format("subscribing to process events: {}", errno_text()));
  return ok();
}

// The process (tgid) an event is about, or 0 for one that changes no
// process's program: a thread's birth or exit, a uid change, a comm change.
pid_t changed_process(const proc_event& e) {
  switch (e.what) {
    case proc_event::PROC_EVENT_FORK:
      return e.event_data.fork.child_pid == e.event_data.fork.child_tgid ? e.event_data.fork.child_tgid : 0;
    case proc_event::PROC_EVENT_EXEC:
      return e.event_data.exec.process_tgid;
    case proc_event::PROC_EVENT_EXIT:
      return e.event_data.exit.process_pid == e.event_data.exit.process_tgid ? e.event_data.exit.process_tgid : 0;
    default:
      return 0;
  }
}

// Reads one datagram's events into `changes`; false for a message that is
// not the kernel's proc connector speaking.
bool read_datagram(const uint8_t* data, int size, ExecWatch::Changes& changes) {
  // A signed length: NLMSG_NEXT takes a whole aligned message off it, and
  // a last message shorter than its alignment must end the walk, not wrap.
  for (auto* h = reinterpret_cast<const nlmsghdr*>(data); NLMSG_OK(h, size); h = NLMSG_NEXT(h, size)) {
    if (h->nlmsg_type == NLMSG_NOOP) continue;
    if (h->nlmsg_type == NLMSG_ERROR || h->nlmsg_len < NLMSG_LENGTH(sizeof(cn_msg))) return false;
    const auto* message = static_cast<const cn_msg*>(NLMSG_DATA(h));
    if (message->id.idx != CN_IDX_PROC || message->id.val != CN_VAL_PROC) return false;
    if (message->len < sizeof(proc_event) || NLMSG_LENGTH(sizeof(cn_msg) + message->len) > h->nlmsg_len) continue;
    proc_event event;
    std::memcpy(&event, message->data, sizeof(event));
    if (pid_t pid = changed_process(event)) changes.pids.push_back(pid);
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ExecWatch>> ExecWatch::open() {
  int fd = ::socket(PF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_CONNECTOR);
  if (fd < 0) return fail(fmt::format("no netlink connector socket: {}", errno_text()));
  std::unique_ptr<ExecWatch> watch(new ExecWatch(fd));
  int size = kReceiveBuffer;
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  sockaddr_nl address{};
  address.nl_family = AF_NETLINK;
  address.nl_groups = CN_IDX_PROC;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0)
    return fail(fmt::format("binding to the kernel's process events: {}", errno_text()));
  if (auto subscribed = listen(fd); !subscribed) return std::unexpected(subscribed.error());
  if (auto heard = hears_a_child(*watch); !heard) return std::unexpected(heard.error());
  return watch;
}

// The kernel may take the subscription and send nothing: dynid outside the
// initial pid or network namespace, a kernel that drops the request. A
// child of dynid's own, forked and reaped, must be reported within a second.
Status ExecWatch::hears_a_child(ExecWatch& watch) {
  pid_t child = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {  // again when a burst of the host's events overran the buffer
    child = ::fork();
    if (child < 0) return fail(fmt::format("fork for a test event: {}", errno_text()));
    if (child == 0) ::_exit(0);
    int status = 0;
    ::waitpid(child, &status, 0);
    bool lost = false;
    for (int wait_ms = 0; wait_ms < 1000 && !lost; wait_ms += 10) {
      ExecWatch::Changes changes = watch.drain();
      if (std::find(changes.pids.begin(), changes.pids.end(), child) != changes.pids.end()) return ok();
      lost = changes.all;
      if (!lost) ::usleep(10 * 1000);
    }
    if (!lost) break;
  }
  return fail(fmt::format("subscribed, but the kernel reported nothing of a child (pid {}) forked as a test", child));
}

ExecWatch::~ExecWatch() { ::close(fd_); }

ExecWatch::Changes ExecWatch::drain() {
  Changes changes;
  alignas(nlmsghdr) std::array<uint8_t, 8192> buffer;
  while (true) {
    sockaddr_nl from{};
    socklen_t from_size = sizeof(from);
    ssize_t n = ::recvfrom(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from),
                           &from_size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOBUFS) {  // the kernel dropped events: trust nothing read before
      changes.all = true;
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) changes.all = true;  // unsure what was missed
    if (n <= 0) break;  // EAGAIN: all read
    // Only the kernel (port 0) sends process events; anything else is
    // not trusted to say what did not change.
    if (from.nl_pid != 0 || !read_datagram(buffer.data(), static_cast<int>(n), changes)) changes.all = true;
  }
  return changes;
}

}  // namespace dyni
