// Encoding and strict decoding of control-protocol messages.
#include "common/protocol.h"

#include <array>

namespace dyni::protocol {
namespace {

using nlohmann::json;

constexpr std::array kCommands = {cmd::kPing, cmd::kStatus, cmd::kProfile, cmd::kStop, cmd::kReload,
                                  cmd::kUndo, cmd::kRedo, cmd::kLicenseChanged};

// Parses one line of JSON into an object, without exceptions escaping.
Result<json> parse_object(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  json value = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return fail("malformed request: not valid JSON");
  if (!value.is_object()) return fail("malformed request: not a JSON object");
  return value;
}

Status check_version(const json& object) {
  auto it = object.find("version");
  if (it == object.end() || !it->is_number_integer())
    return fail("malformed request: missing integer \"version\"");
  if (it->get<long long>() != kVersion)
    return fail("unsupported protocol version " + it->dump() + " (this dynid speaks " +
                std::to_string(kVersion) + ")");
  return ok();
}

}  // namespace

bool is_known_command(std::string_view command) {
  for (const char* known : kCommands)
    if (command == known) return true;
  return false;
}

std::string encode(const Request& request) {
  json args = request.args.is_null() ? json::object() : request.args;
  json j = {{"version", kVersion}, {"command", request.command}, {"args", args}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string encode(const Response& response) {
  json j = {{"version", kVersion},
            {"ok", response.ok},
            {"message", response.message},
            {"data", response.data}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<Request> decode_request(std::string_view line) {
  if (line.size() > kMaxRequestBytes) return fail("request too large");
  auto object = parse_object(line);
  if (!object) return std::unexpected(object.error());
  if (auto v = check_version(*object); !v) return std::unexpected(v.error());
  auto command = object->find("command");
  if (command == object->end() || !command->is_string())
    return fail("malformed request: missing string \"command\"");
  Request request{command->get<std::string>(), json::object()};
  if (!is_known_command(request.command))
    return fail("unknown command \"" + request.command + "\"");
  if (auto args = object->find("args"); args != object->end()) {
    if (!args->is_object()) return fail("malformed request: \"args\" must be an object");
    request.args = *args;
  }
  return request;
}

Result<Response> decode_response(std::string_view line) {
  auto object = parse_object(line);
  if (!object) return fail("malformed response from dynid");
  if (auto v = check_version(*object); !v) return std::unexpected(v.error());
  auto ok_field = object->find("ok");
  auto message = object->find("message");
  if (ok_field == object->end() || !ok_field->is_boolean() || message == object->end() ||
      !message->is_string())
    return fail("malformed response from dynid");
  Response response{ok_field->get<bool>(), message->get<std::string>(), json::object()};
  if (auto data = object->find("data"); data != object->end()) response.data = *data;
  return response;
}

}  // namespace dyni::protocol
