// dyni-token: run your own subscriptions. Makes an Ed25519 key pair and mints
// tokens that dynid accepts when /etc/dyni.conf trusts the public key:
//   dyni-token keygen --dir DIR
//   dyni-token mint --key DIR/license-private.pem --subscription ID --hosts N --expires YYYY-MM-DD [--host MACHINE-ID]
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <string>

#include "common/file_io.h"
#include "common/license_token.h"

namespace {

using dyni::Result;

const char* kUsage =
    "usage: dyni-token keygen --dir DIR\n"
    "       dyni-token mint --key PRIVATE.pem --subscription ID --hosts N --expires YYYY-MM-DD\n"
    "                       [--host MACHINE-ID]\n"
    "keygen writes DIR/license-private.pem (keep it secret) and DIR/license-public.pem\n"
    "(name it in /etc/dyni.conf: [license] public_key = ...). mint prints a token.\n";

Result<std::map<std::string, std::string>> parse_options(int argc, char** argv) {
  std::map<std::string, std::string> options;
  for (int i = 2; i < argc; i += 2) {
    std::string key = argv[i];
    if (!key.starts_with("--") || i + 1 >= argc) return dyni::fail("bad option '" + key + "'");
    options[key.substr(2)] = argv[i + 1];
  }
  return options;
}

int keygen(const std::map<std::string, std::string>& options) {
  if (!options.count("dir") || options.size() != 1) return std::fputs(kUsage, stderr), 2;
  auto pair = dyni::license::generate_key_pair();
  const std::string& dir = options.at("dir");
  if (!pair) return std::cerr << "dyni-token: " << pair.error().message() << "\n", 1;
  for (auto [name, pem, mode] : {std::tuple{"/license-private.pem", pair->private_pem, 0600},
                                 std::tuple{"/license-public.pem", pair->public_pem, 0644}}) {
    if (auto w = dyni::write_file_atomic(dir + name, pem, mode); !w)
      return std::cerr << "dyni-token: " << w.error().message() << "\n", 1;
  }
  std::cout << dir << "/license-private.pem\n" << dir << "/license-public.pem\n";
  return 0;
}

int mint(const std::map<std::string, std::string>& options) {
  for (const char* required : {"key", "subscription", "hosts", "expires"})
    if (!options.count(required)) return std::fputs(kUsage, stderr), 2;
  auto key = dyni::read_file(options.at("key"), 64 * 1024);
  auto expires = dyni::license::parse_date(options.at("expires"));
  if (!key) return std::cerr << "dyni-token: " << key.error().message() << "\n", 1;
  if (!expires) return std::cerr << "dyni-token: " << expires.error().message() << "\n", 1;
  dyni::license::Claims claims;
  claims.subscription = options.at("subscription");
  claims.hosts = std::atoi(options.at("hosts").c_str());
  claims.expires = *expires;
  claims.issued = static_cast<int64_t>(std::time(nullptr));
  if (options.count("host")) claims.host = options.at("host");
  if (claims.hosts < 1) return std::cerr << "dyni-token: --hosts must be a positive number\n", 2;
  auto token = dyni::license::mint(claims, *key);
  if (!token) return std::cerr << "dyni-token: " << token.error().message() << "\n", 1;
  std::cout << *token << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string verb = argc > 1 ? argv[1] : "";
  auto options = parse_options(argc, argv);
  if (!options || (verb != "keygen" && verb != "mint")) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  return verb == "keygen" ? keygen(*options) : mint(*options);
}
