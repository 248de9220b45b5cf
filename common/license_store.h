// The license bound to this host: <state_dir>/license.json holds the token and
// the machine-id it was bound to. Used by `dyni -license=...` (which works with
// or without the daemon) and by dynid (which optimizes only while it is valid).
#pragma once

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/license_token.h"
#include "common/result.h"

namespace dyni::license {

struct Binding {
  std::string token;
  std::string machine_id;
  int64_t bound_at = 0;
};

// What `-license=status`, `-status -json` and dynid's gate report.
struct LicenseState {
  bool active = false;
  std::string summary;  // one line for people: "active: subscription X, 3 hosts, expires ..."
  Claims claims;        // meaningful when active
};

Result<std::string> read_machine_id();
// The PEM to trust: [license] public_key from the config, or the vendor key.
Result<std::string> trusted_public_key(const Config& config);

// Verifies the token for this host and stores the binding. Replaces an earlier one.
Result<Claims> activate(const std::string& token, const Config& config, int64_t now);
// Removes the binding if `token` is the bound one.
Status release(const std::string& token);
// Evaluates the stored binding now (missing, foreign host, expired, forged, ...).
LicenseState current(const Config& config, int64_t now);

}  // namespace dyni::license
