// Subscription tokens: a signed statement (Ed25519) of subscription id,
// number of hosts and expiry, optionally pinned to one host's machine-id.
//
// Token text: "dyni1." + base64url(JSON claims) + "." + base64url(signature)
// where the signature covers everything before the last '.'.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace dyni::license {

struct Claims {
  std::string subscription;  // subscription id, e.g. "acme-db-2027"
  int hosts = 1;             // number of hosts the subscription covers
  int64_t expires = 0;       // unix seconds; the token is invalid from then on
  int64_t issued = 0;        // unix seconds
  std::string host;          // optional: the only machine-id it may bind to
};

struct KeyPair {
  std::string private_pem;
  std::string public_pem;
};

// The vendor's public key, trusted unless /etc/dyni.conf names another.
extern const char* const kVendorPublicKeyPem;

Result<KeyPair> generate_key_pair();
Result<std::string> mint(const Claims& claims, const std::string& private_pem);

// Checks form, signature against `public_pem` and expiry against `now`.
// Errors say precisely which check failed.
Result<Claims> verify(std::string_view token, const std::string& public_pem, int64_t now);

// "2027-12-31" (UTC) for messages.
std::string format_date(int64_t unix_seconds);
// Parses "YYYY-MM-DD" as 00:00 UTC of that day.
Result<int64_t> parse_date(const std::string& text);

}  // namespace dyni::license
