// dyni-bench-jit ELF PROFILE.json [FRACTION]: CPU time of the whole jit
// (jit/pipeline.h) for the module's hot set — the functions covering
// FRACTION (default 0.99) of its samples — as dynid will run it. Prints the
// median of 5 runs with and without the verifier, and the one-time cost of
// reading the module (ELF, symbols, FDEs), as JSON. Goal: ≤ 1 s of CPU.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "jit/module_image.h"
#include "jit/pipeline.h"

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dyni;
  if (argc < 3) {
    std::fprintf(stderr, "usage: dyni-bench-jit ELF PROFILE.json [FRACTION]\n");
    return 2;
  }
  double fraction = argc > 3 ? std::atof(argv[3]) : 0.99;
  std::ifstream in(argv[2]);
  auto json = nlohmann::json::parse(in, nullptr, false);
  auto profile = jit::ModuleProfile::from_json(json);
  double t0 = cpu_seconds();
  auto file = elf::ElfFile::open(argv[1]);
  auto table = file ? elf::FunctionTable::build(*file) : std::unexpected(file.error());
  if (!profile || !table) {
    std::fprintf(stderr, "dyni-bench-jit: %s\n", (!profile ? profile.error() : table.error()).message().c_str());
    return 1;
  }
  jit::ModuleImage image(*file);
  double load = cpu_seconds() - t0;
  uint64_t cache_base = jit::provisional_cache_base(*table);
  jit::ModuleInput input{&*table, &image, &*profile, profile->hot_set(fraction), cache_base, {}, {}, 0};
  jit::use_unwind_info(input, *file);
  std::vector<double> plain, verified;
  std::size_t cached = 0, bytes = 0;
  for (int round = 0; round < 5; ++round) {
    for (bool verify : {false, true}) {
      jit::JitOptions options;
      options.cache.verify = verify;
      double start = cpu_seconds();
      auto plan = jit::optimize_module(input, options);
      (verify ? verified : plain).push_back(cpu_seconds() - start);
      if (!plan) {
        std::fprintf(stderr, "dyni-bench-jit: %s\n", plan.error().message().c_str());
        return 1;
      }
      cached = plan->cache.functions.size();
      bytes = plan->cache.bytes.size();
    }
  }
  std::printf("{\"hot_functions\": %zu, \"cached_functions\": %zu, \"cache_bytes\": %zu, "
              "\"module_read_cpu_s\": %.3f, \"jit_cpu_s\": %.3f, \"jit_with_verifier_cpu_s\": %.3f, "
              "\"goal_cpu_s\": 1.0}\n",
              input.hot.size(), cached, bytes, load, median(plain), median(verified));
  return 0;
}
