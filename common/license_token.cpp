// Ed25519 signing and verification of subscription tokens (OpenSSL 3).
#include "common/license_token.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

namespace dyni::license {

const char* const kVendorPublicKeyPem =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEAndky60GV4EZ0eUo7w9C9jBj/9hw0O87Tlw+1x0JaGpk=\n"
    "-----END PUBLIC KEY-----\n";

namespace {

constexpr std::string_view kPrefix = "dyni1.";
constexpr std::size_t kMaxTokenBytes = 4096;

using PKey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;
using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;

std::string base64url_encode(const unsigned char* data, std::size_t size) {
  std::string out(4 * ((size + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(size));
  out.resize(n);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = (c == '+') ? '-' : (c == '/') ? '_' : c;
  return out;
}

Result<std::vector<unsigned char>> base64url_decode(std::string_view text) {
  std::string b64;
  for (char c : text) {
    if (c == '-') c = '+';
    else if (c == '_') c = '/';
    else if (!std::isalnum(static_cast<unsigned char>(c))) return fail("bad base64url character");
    b64 += c;
  }
  if (b64.size() % 4 == 1) return fail("bad base64url length");
  std::size_t padding = (4 - b64.size() % 4) % 4;
  b64.append(padding, '=');
  std::vector<unsigned char> out(b64.size() / 4 * 3);
  int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(b64.data()),
                          static_cast<int>(b64.size()));
  if (n < 0) return fail("bad base64url data");
  out.resize(static_cast<std::size_t>(n) - padding);
  return out;
}

Result<PKey> read_key(const std::string& pem, bool is_private) {
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  if (!bio) return fail("out of memory");
  EVP_PKEY* key = is_private ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
                             : PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
  if (!key) return fail(is_private ? "not a PEM private key" : "not a PEM public key");
  PKey owned(key, EVP_PKEY_free);
  if (EVP_PKEY_get_id(key) != EVP_PKEY_ED25519) return fail("key is not an Ed25519 key");
  return owned;
}

Result<std::string> key_to_pem(EVP_PKEY* key, bool is_private) {
  Bio bio(BIO_new(BIO_s_mem()), BIO_free);
  int written = is_private ? PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr)
                           : PEM_write_bio_PUBKEY(bio.get(), key);
  if (!bio || written != 1) return fail("cannot write PEM key");
  char* data = nullptr;
  long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

Result<Claims> claims_from_json(const std::vector<unsigned char>& bytes) {
  auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail("malformed token: claims are not JSON");
  Claims c;
  auto sub = j.find("sub"), hosts = j.find("hosts"), exp = j.find("exp"), iat = j.find("iat");
  if (sub == j.end() || !sub->is_string() || sub->get<std::string>().empty())
    return fail("malformed token: no subscription id");
  if (hosts == j.end() || !hosts->is_number_integer() || hosts->get<long long>() < 1 ||
      hosts->get<long long>() > 1000000)
    return fail("malformed token: bad host count");
  if (exp == j.end() || !exp->is_number_integer())
    return fail("malformed token: no expiry");
  c.subscription = sub->get<std::string>();
  c.hosts = static_cast<int>(hosts->get<long long>());
  c.expires = exp->get<int64_t>();
  if (iat != j.end() && iat->is_number_integer()) c.issued = iat->get<int64_t>();
  if (auto host = j.find("host"); host != j.end()) {
    if (!host->is_string()) return fail("malformed token: bad host");
    c.host = host->get<std::string>();
  }
  return c;
}

std::string claims_to_json(const Claims& c) {
  nlohmann::json j = {{"sub", c.subscription}, {"hosts", c.hosts}, {"exp", c.expires},
                      {"iat", c.issued}};
  if (!c.host.empty()) j["host"] = c.host;
  return j.dump();
}

}  // namespace

Result<KeyPair> generate_key_pair() {
  EVP_PKEY* raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (!raw) return fail("Ed25519 key generation failed");
  PKey key(raw, EVP_PKEY_free);
  auto priv = key_to_pem(key.get(), true);
  auto pub = key_to_pem(key.get(), false);
  if (!priv || !pub) return fail("cannot encode the new key pair");
  return KeyPair{*priv, *pub};
}

Result<std::string> mint(const Claims& claims, const std::string& private_pem) {
  auto key = read_key(private_pem, true);
  if (!key) return std::unexpected(key.error());
  std::string payload = claims_to_json(claims);
  std::string signed_part = std::string(kPrefix) +
      base64url_encode(reinterpret_cast<const unsigned char*>(payload.data()), payload.size());
  MdCtx ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char sig[64];
  std::size_t sig_len = sizeof sig;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key->get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &sig_len,
                     reinterpret_cast<const unsigned char*>(signed_part.data()),
                     signed_part.size()) != 1)
    return fail("signing failed");
  return signed_part + "." + base64url_encode(sig, sig_len);
}

Result<Claims> verify(std::string_view token, const std::string& public_pem, int64_t now) {
  if (token.size() > kMaxTokenBytes) return fail("malformed token: too long");
  if (!token.starts_with(kPrefix)) return fail("malformed token: does not start with 'dyni1.'");
  std::size_t dot = token.rfind('.');
  if (dot < kPrefix.size()) return fail("malformed token: no signature part");
  auto payload = base64url_decode(token.substr(kPrefix.size(), dot - kPrefix.size()));
  auto sig = base64url_decode(token.substr(dot + 1));
  if (!payload || !sig) return fail("malformed token: not base64url");
  if (sig->size() != 64) return fail("malformed token: signature has the wrong length");
  auto key = read_key(public_pem, false);
  if (!key) return fail("license public key unusable: " + key.error().message());
  MdCtx ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key->get()) != 1 ||
      EVP_DigestVerify(ctx.get(), sig->data(), sig->size(),
                       reinterpret_cast<const unsigned char*>(token.data()), dot) != 1)
    return fail("token signature is not valid for the trusted license key (forged or for another vendor)");
  auto claims = claims_from_json(*payload);
  if (!claims) return claims;
  if (now >= claims->expires) return fail("token expired on " + format_date(claims->expires));
  return claims;
}

std::string format_date(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  tm utc{};
  if (!gmtime_r(&t, &utc)) return std::to_string(unix_seconds);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%d", &utc);
  return buf;
}

Result<int64_t> parse_date(const std::string& text) {
  tm utc{};
  const char* end = strptime(text.c_str(), "%Y-%m-%d", &utc);
  if (!end || *end != '\0') return fail("'" + text + "' is not a date (YYYY-MM-DD)");
  return static_cast<int64_t>(timegm(&utc));
}

}  // namespace dyni::license
