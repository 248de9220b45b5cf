// Binding a verified subscription token to this host's machine-id.
#include "common/license_store.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/paths.h"

namespace dyni::license {
namespace {

std::string describe(const Claims& c) {
  return "subscription " + c.subscription + ", " + std::to_string(c.hosts) +
         (c.hosts == 1 ? " host" : " hosts") + ", expires " + format_date(c.expires);
}

Result<Binding> read_binding() {
  auto text = read_file(paths::license_file());
  if (!text) return std::unexpected(text.error());
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("token") || !j["token"].is_string() ||
      !j.contains("machine_id") || !j["machine_id"].is_string())
    return fail(paths::license_file() + " is corrupt; run dyni -license=start again");
  Binding b{j["token"], j["machine_id"], 0};
  if (j.contains("bound_at") && j["bound_at"].is_number_integer()) b.bound_at = j["bound_at"];
  return b;
}

Result<Claims> verify_for_host(const std::string& token, const Config& config, int64_t now,
                               const std::string& machine_id) {
  auto key = trusted_public_key(config);
  if (!key) return std::unexpected(key.error());
  auto claims = verify(token, *key, now);
  if (!claims) return claims;
  if (!claims->host.empty() && claims->host != machine_id)
    return fail("token is for host " + claims->host + ", this host is " + machine_id);
  return claims;
}

}  // namespace

Result<std::string> read_machine_id() {
  auto text = read_file(paths::machine_id_file(), 4096);
  if (!text) return std::unexpected(text.error());
  std::string id = *text;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  if (id.empty()) return fail(paths::machine_id_file() + " is empty");
  return id;
}

Result<std::string> trusted_public_key(const Config& config) {
  if (config.license_public_key.empty()) return std::string(kVendorPublicKeyPem);
  auto pem = read_file(config.license_public_key, 64 * 1024);
  if (!pem) return fail("[license] public_key: " + pem.error().message());
  return pem;
}

Result<Claims> activate(const std::string& token, const Config& config, int64_t now) {
  auto machine_id = read_machine_id();
  if (!machine_id) return std::unexpected(machine_id.error());
  auto claims = verify_for_host(token, config, now, *machine_id);
  if (!claims) return claims;
  if (auto dir = ensure_dir(paths::state_dir(), 0700); !dir) return std::unexpected(dir.error());
  nlohmann::json j = {{"token", token}, {"machine_id", *machine_id}, {"bound_at", now}};
  if (auto w = write_file_atomic(paths::license_file(), j.dump(2) + "\n", 0600); !w)
    return std::unexpected(w.error());
  return claims;
}

Status release(const std::string& token) {
  auto binding = read_binding();
  if (!binding) return fail("no license is active on this host");
  if (binding->token != token) return fail("that token is not the license active on this host");
  if (::unlink(paths::license_file().c_str()) != 0)
    return fail("cannot remove " + paths::license_file());
  return ok();
}

LicenseState current(const Config& config, int64_t now) {
  if (::access(paths::license_file().c_str(), F_OK) != 0)
    return {false, "no license (run dyni -license=start -token=<token>)", {}};
  auto binding = read_binding();
  if (!binding) return {false, "invalid: " + binding.error().message(), {}};
  auto machine_id = read_machine_id();
  if (!machine_id) return {false, "invalid: " + machine_id.error().message(), {}};
  if (binding->machine_id != *machine_id)
    return {false, "invalid: license was bound on host " + binding->machine_id +
                       ", this host is " + *machine_id + " (run dyni -license=start again)", {}};
  auto claims = verify_for_host(binding->token, config, now, *machine_id);
  if (!claims) return {false, "invalid: " + claims.error().message(), {}};
  return {true, "active: " + describe(*claims), *claims};
}

}  // namespace dyni::license
