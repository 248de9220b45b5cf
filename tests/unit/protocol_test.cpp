// Control protocol: round trips and strict refusal of malformed messages.
#include <gtest/gtest.h>

#include "common/protocol.h"

namespace dyni::protocol {
namespace {

TEST(Protocol, RequestRoundTrip) {
  std::string line = encode(Request{cmd::kStatus, {{"x", 1}}});
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
  auto r = decode_request(line);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->command, "status");
  EXPECT_EQ(r->args["x"], 1);
}

TEST(Protocol, NullArgsAreSentAsObject) {
  auto r = decode_request(encode(Request{cmd::kPing, {}}));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(r->args.is_object());
}

TEST(Protocol, ResponseRoundTrip) {
  auto r = decode_response(encode(Response{false, "nope\nwith newline", {{"k", "v"}}}));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->message, "nope\nwith newline");
  EXPECT_EQ(r->data["k"], "v");
}

std::string request_error(const std::string& line) {
  auto r = decode_request(line);
  return r ? "" : r.error().message();
}

TEST(Protocol, RefusesMalformedRequests) {
  EXPECT_EQ(request_error(""), "malformed request: not valid JSON");
  EXPECT_EQ(request_error("garbage"), "malformed request: not valid JSON");
  EXPECT_EQ(request_error("[1,2]"), "malformed request: not a JSON object");
  EXPECT_EQ(request_error("{}"), "malformed request: missing integer \"version\"");
  EXPECT_EQ(request_error(R"({"version":"1","command":"ping"})"),
            "malformed request: missing integer \"version\"");
  EXPECT_EQ(request_error(R"({"version":2,"command":"ping"})"),
            "unsupported protocol version 2 (this dynid speaks 1)");
  EXPECT_EQ(request_error(R"({"version":1})"), "malformed request: missing string \"command\"");
  EXPECT_EQ(request_error(R"({"version":1,"command":7})"),
            "malformed request: missing string \"command\"");
  EXPECT_EQ(request_error(R"({"version":1,"command":"format-disk"})"),
            "unknown command \"format-disk\"");
  EXPECT_EQ(request_error(R"({"version":1,"command":"ping","args":[]})"),
            "malformed request: \"args\" must be an object");
  EXPECT_EQ(request_error(std::string(kMaxRequestBytes + 1, ' ')), "request too large");
}

TEST(Protocol, DeepNestingIsRefusedNotACrash) {
  std::string deep = std::string(30000, '[') + std::string(30000, ']');
  EXPECT_EQ(request_error(deep), "malformed request: not a JSON object");
}

TEST(Protocol, RefusesMalformedResponses) {
  EXPECT_FALSE(decode_response("{}"));
  EXPECT_FALSE(decode_response(R"({"version":1,"ok":"yes","message":""})"));
  EXPECT_FALSE(decode_response(R"({"version":9,"ok":true,"message":""})"));
}

}  // namespace
}  // namespace dyni::protocol
