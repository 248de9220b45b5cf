// Parsing and validation of dyni's flags.
#include "dyni-cli/cli_args.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>

namespace dyni::cli {

const char* const kUsage =
    "usage: dyni <command>\n"
    "  -start                         start the dyni daemon (dynid)\n"
    "  -stop                          stop the daemon; optimized targets stay optimized\n"
    "  -status [-json]                daemon state and one line per target\n"
    "  -metrics                       the same facts for Prometheus (text exposition format)\n"
    "  -profile=PID [-json]           the hottest functions dyni sampled in target PID\n"
    "  -addr2orig=PID ADDR...         the original function and instruction of each cache\n"
    "                                 address (hex) of process PID, also after it exited\n"
    "  -caches                        every process that runs code of dyni's, from its memory\n"
    "                                 (no daemon needed); exit 1 when one does\n"
    "  -undo                          return every target to its original code\n"
    "  -redo                          re-apply the kept optimization\n"
    "  -reload                        re-read /etc/dyni.conf\n"
    "  -license=start -token=TOKEN    bind a subscription license to this host\n"
    "  -license=stop -token=TOKEN     release this host's license\n"
    "  -license=status                show this host's license\n"
    "  -version                       print the version\n"
    "  -help                          print this help\n"
    "All commands but -help and -version must be run as root.\n";

namespace {

constexpr long kMaxPid = 4194304;  // PID_MAX_LIMIT on 64-bit Linux

const std::map<std::string, Action>& simple_flags() {
  static const std::map<std::string, Action> flags = {
      {"-start", Action::Start},   {"-stop", Action::Stop},     {"-status", Action::Status},
      {"-metrics", Action::Metrics}, {"-caches", Action::Caches},
      {"-undo", Action::Undo},     {"-redo", Action::Redo},     {"-reload", Action::Reload},
      {"-version", Action::Version}, {"-help", Action::Help},   {"--help", Action::Help},
      {"-license=start", Action::LicenseStart}, {"-license=stop", Action::LicenseStop},
      {"-license=status", Action::LicenseStatus},
  };
  return flags;
}

}  // namespace

Result<Command> parse_args(const std::vector<std::string>& args) {
  Command command;
  std::optional<Action> action;
  bool has_token = false;
  for (const std::string& a : args) {
    if (a == "-json") {
      command.json = true;
    } else if (a.starts_with("-token=")) {
      if (has_token) return fail("-token given twice");
      command.token = a.substr(7);
      has_token = true;
    } else if (auto it = simple_flags().find(a); it != simple_flags().end()) {
      if (action) return fail("only one command at a time: " + a);
      action = it->second;
    } else if (a.starts_with("-profile=")) {
      if (action) return fail("only one command at a time: " + a);
      char* end = nullptr;
      command.pid = std::strtol(a.c_str() + 9, &end, 10);
      if (a.size() == 9 || *end != '\0' || command.pid <= 0 || command.pid > kMaxPid) return fail("-profile takes a pid: " + a);
      action = Action::Profile;
    } else if (a.starts_with("-addr2orig=")) {
      if (action) return fail("only one command at a time: " + a);
      char* end = nullptr;
      command.pid = std::strtol(a.c_str() + 11, &end, 10);
      if (a.size() == 11 || *end != '\0' || command.pid <= 0 || command.pid > kMaxPid)
        return fail("-addr2orig takes a pid: " + a);
      action = Action::Addr2Orig;
    } else if (action == Action::Addr2Orig && !a.empty() && std::isxdigit(static_cast<unsigned char>(a[0]))) {
      char* end = nullptr;
      errno = 0;
      const unsigned long long addr = std::strtoull(a.c_str(), &end, 16);
      if (*end != '\0' || errno != 0) return fail("not a hex address: '" + a + "'");
      command.addresses.push_back(addr);
    } else if (a.starts_with("-license=")) {
      return fail("-license takes start, stop or status, not '" + a.substr(9) + "'");
    } else {
      return fail("unknown flag '" + a + "'");
    }
  }
  if (!action) return fail("no command given");
  command.action = *action;
  if (command.action == Action::Addr2Orig && command.addresses.empty())
    return fail("-addr2orig=PID needs at least one address");
  if (command.json && command.action != Action::Status && command.action != Action::Profile)
    return fail("-json goes with -status or -profile");
  bool wants_token = command.action == Action::LicenseStart || command.action == Action::LicenseStop;
  if (wants_token && (!has_token || command.token.empty()))
    return fail("-license=start and -license=stop need -token=TOKEN");
  if (!wants_token && has_token) return fail("-token goes with -license=start or -license=stop");
  return command;
}

}  // namespace dyni::cli
