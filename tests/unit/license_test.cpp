// License tokens and the host binding: each failure has its precise reason.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "common/license_store.h"
#include "common/license_token.h"

namespace dyni::license {
namespace {

constexpr int64_t kNow = 1800000000;  // 2027-01-15

Claims claims(int64_t expires = kNow + 86400, std::string host = "") {
  return {"acme-42", 3, expires, kNow - 10, std::move(host)};
}

class LicenseTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    auto k = generate_key_pair();
    ASSERT_TRUE(k) << k.error().message();
    keys = *k;
  }
  KeyPair keys;
};

TEST_F(LicenseTokens, MintedTokenVerifies) {
  auto token = mint(claims(), keys.private_pem);
  ASSERT_TRUE(token) << token.error().message();
  EXPECT_TRUE(token->starts_with("dyni1."));
  auto c = verify(*token, keys.public_pem, kNow);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->subscription, "acme-42");
  EXPECT_EQ(c->hosts, 3);
  EXPECT_EQ(c->expires, kNow + 86400);
}

TEST_F(LicenseTokens, ForgedTokenIsRejected) {
  auto other = generate_key_pair();
  ASSERT_TRUE(other);
  auto token = mint(claims(), other->private_pem);
  ASSERT_TRUE(token);
  auto c = verify(*token, keys.public_pem, kNow);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("signature is not valid"), std::string::npos);
}

TEST_F(LicenseTokens, TamperedClaimsAreRejected) {
  auto token = mint(claims(), keys.private_pem);
  auto genuine_other = mint({"acme-42", 999, kNow + 86400, kNow, ""}, keys.private_pem);
  ASSERT_TRUE(token && genuine_other);
  // Splice the payload of one valid token onto the signature of another.
  std::string spliced = genuine_other->substr(0, genuine_other->rfind('.')) +
                        token->substr(token->rfind('.'));
  auto c = verify(spliced, keys.public_pem, kNow);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("signature is not valid"), std::string::npos);
}

TEST_F(LicenseTokens, ExpiredTokenIsRejectedWithItsDate) {
  auto token = mint(claims(kNow - 1), keys.private_pem);
  ASSERT_TRUE(token);
  auto c = verify(*token, keys.public_pem, kNow);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message(), "token expired on " + format_date(kNow - 1));
}

TEST_F(LicenseTokens, MalformedTokensAreRejected) {
  for (std::string bad : std::vector<std::string>{"", "hello", "dyni1.", "dyni1.abc", "dyni1.!!!.xyz", "dyni2.a.b",
                          "dyni1.eyJ9.AAAA", std::string(5000, 'x')}) {
    auto c = verify(bad, keys.public_pem, kNow);
    ASSERT_FALSE(c) << bad;
    EXPECT_NE(c.error().message().find("malformed token"), std::string::npos)
        << bad << " -> " << c.error().message();
  }
}

TEST_F(LicenseTokens, ValidSignatureOverBadClaimsIsMalformed) {
  // A correctly signed token whose claims are missing fields.
  Claims c = claims();
  c.hosts = 0;
  auto token = mint(c, keys.private_pem);
  ASSERT_TRUE(token);
  auto v = verify(*token, keys.public_pem, kNow);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().message(), "malformed token: bad host count");
}

TEST_F(LicenseTokens, BadPublicKeyIsReported) {
  auto token = mint(claims(), keys.private_pem);
  auto c = verify(*token, "not a key", kNow);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("license public key unusable"), std::string::npos);
}

TEST(LicenseDates, ParseAndFormat) {
  auto d = parse_date("2030-01-01");
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, 1893456000);
  EXPECT_EQ(format_date(*d), "2030-01-01");
  EXPECT_FALSE(parse_date("01/01/2030"));
  EXPECT_FALSE(parse_date("2030-01-01x"));
}

// The binding, with state and machine-id in a temporary directory.
class LicenseBinding : public LicenseTokens {
 protected:
  void SetUp() override {
    LicenseTokens::SetUp();
    dir = std::filesystem::temp_directory_path() / ("dyni-lic-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "public.pem") << keys.public_pem;
    set_machine_id("host-a");
    setenv("DYNI_STATE_DIR", (dir / "state").c_str(), 1);
    setenv("DYNI_MACHINE_ID", (dir / "machine-id").c_str(), 1);
    config.license_public_key = dir / "public.pem";
  }
  void TearDown() override {
    unsetenv("DYNI_STATE_DIR");
    unsetenv("DYNI_MACHINE_ID");
    std::filesystem::remove_all(dir);
  }
  void set_machine_id(const std::string& id) { std::ofstream(dir / "machine-id") << id << "\n"; }

  std::filesystem::path dir;
  Config config;
};

TEST_F(LicenseBinding, BindShowRelease) {
  EXPECT_FALSE(current(config, kNow).active);
  auto token = mint(claims(), keys.private_pem);
  ASSERT_TRUE(activate(*token, config, kNow));
  auto state = current(config, kNow);
  EXPECT_TRUE(state.active) << state.summary;
  EXPECT_EQ(state.summary, "active: subscription acme-42, 3 hosts, expires " + format_date(kNow + 86400));
  EXPECT_EQ(std::filesystem::status(dir / "state" / "license.json").permissions() &
                std::filesystem::perms::others_read,
            std::filesystem::perms::none);
  auto wrong = release("dyni1.other");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().message(), "that token is not the license active on this host");
  ASSERT_TRUE(release(*token));
  EXPECT_FALSE(current(config, kNow).active);
  EXPECT_EQ(release(*token).error().message(), "no license is active on this host");
}

TEST_F(LicenseBinding, ExpiryAfterBindingDeactivates) {
  auto token = mint(claims(kNow + 100), keys.private_pem);
  ASSERT_TRUE(activate(*token, config, kNow));
  auto later = current(config, kNow + 200);
  EXPECT_FALSE(later.active);
  EXPECT_NE(later.summary.find("expired"), std::string::npos) << later.summary;
}

TEST_F(LicenseBinding, TokenPinnedToAnotherHostIsRefused) {
  auto token = mint(claims(kNow + 86400, "host-b"), keys.private_pem);
  auto r = activate(*token, config, kNow);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "token is for host host-b, this host is host-a");
  auto pinned_here = mint(claims(kNow + 86400, "host-a"), keys.private_pem);
  EXPECT_TRUE(activate(*pinned_here, config, kNow));
}

TEST_F(LicenseBinding, BindingCopiedToAnotherHostIsInvalid) {
  auto token = mint(claims(), keys.private_pem);
  ASSERT_TRUE(activate(*token, config, kNow));
  set_machine_id("host-c");
  auto state = current(config, kNow);
  EXPECT_FALSE(state.active);
  EXPECT_NE(state.summary.find("bound on host host-a, this host is host-c"), std::string::npos)
      << state.summary;
}

TEST_F(LicenseBinding, CorruptStateFileIsReported) {
  auto token = mint(claims(), keys.private_pem);
  ASSERT_TRUE(activate(*token, config, kNow));
  std::ofstream(dir / "state" / "license.json") << "{not json";
  auto state = current(config, kNow);
  EXPECT_FALSE(state.active);
  EXPECT_NE(state.summary.find("corrupt"), std::string::npos) << state.summary;
}

TEST_F(LicenseBinding, VendorKeyIsTrustedByDefault) {
  Config vendor_only;  // no [license] public_key: site-minted tokens are forgeries
  auto token = mint(claims(), keys.private_pem);
  auto r = activate(*token, vendor_only, kNow);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("signature is not valid"), std::string::npos);
}

}  // namespace
}  // namespace dyni::license
