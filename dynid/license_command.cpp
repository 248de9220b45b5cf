// The license commands, one-shot (license_command.h).
#include "dynid/license_command.h"

#include <ctime>
#include <iostream>

#include "common/config.h"
#include "common/license_store.h"

namespace dyni {
namespace {

constexpr int kOk = 0, kError = 1;

int report_error(const std::string& message) {
  std::cerr << "dyni: " << message << "\n";
  return kError;
}

int64_t now_s() { return static_cast<int64_t>(::time(nullptr)); }

}  // namespace

int run_license_command(const std::string& action, const std::string& token, const std::string& config_path) {
  auto config = load_config(config_path);
  if (!config) return report_error(config.error().message());
  if (action == "status") {
    auto state = license::current(*config, now_s());
    std::cout << "license " << state.summary << "\n";
    return state.active ? kOk : kError;
  }
  if (action == "stop") {
    if (auto released = license::release(token); !released) return report_error(released.error().message());
    std::cout << "license released\n";
    return kOk;
  }
  if (action != "start") return report_error("no license command '" + action + "' (start, stop or status)");
  auto claims = license::activate(token, *config, now_s());
  if (!claims) return report_error("license not started: " + claims.error().message());
  std::cout << "license active: subscription " << claims->subscription << ", " << claims->hosts
            << (claims->hosts == 1 ? " host" : " hosts") << ", expires " << license::format_date(claims->expires)
            << "\n";
  return kOk;
}

}  // namespace dyni
