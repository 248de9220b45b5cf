// Encoding one instruction with Zydis: a request for long mode, and its bytes.
#pragma once

#include <Zydis/Zydis.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/result.h"

namespace dyni::jit {

// An empty request for mnemonic `m` in 64-bit mode.
inline ZydisEncoderRequest encoder_request(ZydisMnemonic m) {
  ZydisEncoderRequest req;
  std::memset(&req, 0, sizeof req);
  req.machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
  req.mnemonic = m;
  return req;
}

// The bytes of `req`, or why not.
inline Result<std::vector<uint8_t>> encoded(const ZydisEncoderRequest& req) {
  std::array<uint8_t, ZYDIS_MAX_INSTRUCTION_LENGTH> buf{};
  ZyanUSize length = buf.size();
  if (ZYAN_FAILED(ZydisEncoderEncodeInstruction(&req, buf.data(), &length))) return fail("cannot encode an instruction");
  return std::vector<uint8_t>(buf.begin(), buf.begin() + length);
}

}  // namespace dyni::jit
