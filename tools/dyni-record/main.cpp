// dyni-record PID SECONDS OUT.json [--module NAME]: samples a live process
// exactly as dynid's profiler does and saves one module's profile in the form
// the jit consumes (jit/module_profile.h) — by default the module with the
// most samples. `dyni-scan ELF --profile OUT.json` then runs the jit on it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "profiler/profile.h"
#include "profiler/recorder.h"
#include "profiler/sampler.h"
#include "profiler/symbolizer.h"

namespace {

using namespace dyni::profiler;

int module_named(const Symbolizer& symbolizer, const std::string& name) {
  const auto& modules = symbolizer.modules();
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const std::string& path = modules[i].path;
    if (path == name || path.ends_with("/" + name)) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 6 && std::string(argv[4]) == "--module")) {
    std::fprintf(stderr, "usage: dyni-record PID SECONDS OUT.json [--module NAME]\n");
    return 2;
  }
  pid_t pid = std::atoi(argv[1]);
  int seconds = std::atoi(argv[2]);
  auto symbolizer = Symbolizer::for_process(pid);
  auto sampler = symbolizer ? Sampler::attach(pid, SamplerOptions{}) : std::unexpected(symbolizer.error());
  if (!sampler) {
    std::fprintf(stderr, "dyni-record: %s\n", sampler.error().message().c_str());
    return 1;
  }
  Profile profile(&*symbolizer);
  (void)sample_for(*sampler, profile, std::chrono::seconds(seconds));  // a target that exits ends it early
  int module = argc == 6 ? module_named(*symbolizer, argv[5]) : profile.hottest_module();
  if (module < 0) {
    std::fprintf(stderr, "dyni-record: no such module sampled\n");
    return 1;
  }
  dyni::jit::ModuleProfile mp = profile.module_profile(module);
  std::ofstream out(argv[3]);
  out << mp.to_json().dump() << "\n";
  if (!out) {
    std::fprintf(stderr, "dyni-record: cannot write %s\n", argv[3]);
    return 1;
  }
  std::printf("%s: %llu samples of %llu in %zu functions (hot set 99%%: %zu functions)\n", mp.module.c_str(),
              static_cast<unsigned long long>(mp.total_samples), static_cast<unsigned long long>(profile.total()),
              mp.functions.size(), mp.hot_set(0.99).size());
  return 0;
}
