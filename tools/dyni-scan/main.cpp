// dyni-scan ELF-FILE: runs the jit over every function of a binary, as if all
// were hot: analysis, relocation to a cache 256 MiB away, and the verifier.
// Prints how many functions and bytes dyni would accept, why it rejects the
// others, and exits 1 on any verifier failure. (Profile-guided layout joins as
// it lands; this is the tool the jit's goals are measured with.)
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "jit/cfg.h"
#include "jit/emitter.h"
#include "jit/verifier.h"
#include "jit/module_image.h"

int main(int argc, char** argv) {
  using namespace dyni;
  if (argc != 2) {
    std::fprintf(stderr, "usage: dyni-scan ELF-FILE\n");
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto file = elf::ElfFile::open(argv[1]);
  if (!file) {
    std::fprintf(stderr, "dyni-scan: %s\n", file.error().message().c_str());
    return 1;
  }
  auto table = elf::FunctionTable::build(*file);
  if (!table) {
    std::fprintf(stderr, "dyni-scan: %s: %s\n", argv[1], table.error().message().c_str());
    return 1;
  }
  jit::ModuleImage image(*file);
  std::size_t accepted = 0, total = 0, tables = 0, verifier_failures = 0;
  constexpr uint64_t kCacheDistance = 256ull << 20;
  uint64_t bytes_ok = 0, bytes_all = 0;
  std::map<std::string, std::pair<std::size_t, uint64_t>> rejected;
  std::map<std::string, std::string> example;
  for (const auto& f : table->functions()) {
    if (!image.is_code(f.addr)) continue;
    ++total;
    bytes_all += f.size;
    auto cfg = jit::build_cfg(f, image);
    if (cfg) {
      auto code = jit::emit_in_order(*cfg, f.addr + kCacheDistance);
      auto checked = code ? jit::verify(*cfg, *code) : dyni::Status(std::unexpected(code.error()));
      if (!checked) {
        if (verifier_failures++ < 10)
          std::fprintf(stderr, "verifier failure: %s: %s\n", elf::display_name(f).c_str(),
                       checked.error().message().c_str());
        continue;
      }
      ++accepted;
      bytes_ok += f.size;
      tables += cfg->tables.size();
      continue;
    }
    std::string kind = jit::reason_kind(cfg.error().message());
    rejected[kind].first++;
    rejected[kind].second += f.size;
    if (!example.count(kind)) example[kind] = elf::display_name(f) + ": " + cfg.error().message();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\n", argv[1]);
  std::printf("functions: %zu, accepted %zu (%.1f%%), jump tables resolved %zu\n", total, accepted,
              total ? 100.0 * accepted / total : 0.0, tables);
  std::printf("bytes:     %llu, accepted %llu (%.1f%%)\n", static_cast<unsigned long long>(bytes_all),
              static_cast<unsigned long long>(bytes_ok), bytes_all ? 100.0 * bytes_ok / bytes_all : 0.0);
  for (const auto& [kind, n] : rejected)
    std::printf("rejected: %-45s %6zu functions %9llu bytes  e.g. %s\n", kind.c_str(), n.first,
                static_cast<unsigned long long>(n.second), example[kind].substr(0, 100).c_str());
  std::printf("verifier failures: %zu\n", verifier_failures);
  std::printf("time: %.2f s\n", secs);
  return verifier_failures == 0 ? 0 : 1;
}
