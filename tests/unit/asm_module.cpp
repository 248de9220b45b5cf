// Assembled modules in executable memory, their caches, and isolated calls.
#include "tests/unit/asm_module.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "tests/unit/assembler.h"

namespace dyni::test {
namespace {

void write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n <= 0) _exit(3);
    p += n, size -= static_cast<std::size_t>(n);
  }
}

std::vector<long> read_all(int fd) {
  std::vector<char> bytes;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
  std::vector<long> out(bytes.size() / sizeof(long));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(long));
  return out;
}

void flush_icache(void* from, std::size_t size) {
  __builtin___clear_cache(static_cast<char*>(from), static_cast<char*>(from) + size);
}

}  // namespace

Run run_isolated(uint64_t fn, const Inputs& inputs, unsigned seconds) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {};
  pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    alarm(seconds);  // SIGALRM's default action ends a hung child
    auto call = reinterpret_cast<long (*)(long, long)>(fn);
    for (const auto& [a, b] : inputs) {
      long r = call(a, b);
      write_all(pipe_fds[1], &r, sizeof r);
    }
    _exit(0);
  }
  close(pipe_fds[1]);
  Run run;
  run.results = read_all(pipe_fds[0]);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && run.results.size() == inputs.size()) {
    run.outcome = Outcome::Returned;
  } else {
    run.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    run.outcome = run.signal == SIGALRM ? Outcome::Hung : Outcome::Crashed;
    run.results.clear();
  }
  return run;
}

std::string describe(const Run& run) {
  switch (run.outcome) {
    case Outcome::Returned: return "returned";
    case Outcome::Hung: return "hung";
    case Outcome::Crashed: return "crashed (signal " + std::to_string(run.signal) + ")";
  }
  return "?";
}

std::unique_ptr<AsmModule> AsmModule::load(const std::string& text, const std::vector<std::string>& names) {
  auto m = std::make_unique<AsmModule>();
  auto a = assemble_with_labels(text);
  EXPECT_TRUE(a) << a.error().message();
  if (!a || a->bytes.size() > kArea) return nullptr;
  void* area = mmap(nullptr, 3 * kArea, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(area, MAP_FAILED);
  if (area == MAP_FAILED) return nullptr;
  void* counters = mmap(static_cast<uint8_t*>(area) + 2 * kArea, kArea, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  EXPECT_NE(counters, MAP_FAILED);
  if (counters == MAP_FAILED) return nullptr;
  m->area_ = static_cast<uint8_t*>(area);
  m->original_ = reinterpret_cast<uint64_t>(area);
  m->bytes_ = a->bytes;
  std::memcpy(m->area_, m->bytes_.data(), m->bytes_.size());
  m->image_.add(m->original_, m->bytes_, true);
  for (std::size_t i = 0; i < names.size(); ++i) {
    uint64_t start = a->labels.at(names[i]);
    uint64_t end = i + 1 < names.size() ? a->labels.at(names[i + 1]) : a->labels.at("end");
    m->addr_[names[i]] = m->original_ + start;
    auto cfg = jit::build_cfg(elf::Function{m->original_ + start, end - start, names[i], false, 0}, m->image_);
    EXPECT_TRUE(cfg) << names[i] << ": " << cfg.error().message();
    if (!cfg) return nullptr;
    m->cfgs_[names[i]] = std::make_unique<jit::FunctionCfg>(std::move(*cfg));
  }
  flush_icache(m->area_, m->bytes_.size());
  return m;
}

AsmModule::~AsmModule() {
  if (area_) munmap(area_, 3 * kArea);
}

uint64_t AsmModule::addr(const std::string& name) const { return addr_.at(name); }

jit::CodeCache AsmModule::build(const std::vector<std::string>& hot,
                                const std::function<jit::BlockLayout(const jit::FunctionCfg&)>& layout_of,
                                jit::CacheOptions options, const jit::Promotions& promotions) {
  unpatch();
  std::vector<jit::HotCode> functions;
  for (const std::string& name : hot)
    functions.push_back({cfgs_.at(name).get(), layout_of(*cfgs_.at(name)), false, promotions});
  if (options.counting) options.counters_base = counters_base();
  std::memset(reinterpret_cast<void*>(counters_base()), 0, kArea);
  auto cache = jit::build_code_cache(functions, cache_base(), {}, options);
  EXPECT_TRUE(cache) << cache.error().message();
  if (!cache || cache->bytes.size() > kArea || cache->counter_layout().bytes() > kArea) return {};
  std::vector<uint8_t> table = cache->counter_layout().table();  // striped counters: as dynid writes it
  std::memcpy(reinterpret_cast<void*>(counters_base()), table.data(), table.size());
  std::memset(area_ + kArea, 0xcc, kArea);  // no bytes of an earlier cache past this one's end
  std::vector<uint8_t> loaded = cache->loaded_at(0);  // assembled where it runs: no bias
  std::memcpy(area_ + kArea, loaded.data(), loaded.size());
  for (const jit::CachedFunction& f : cache->functions)
    for (const jit::EntryPatch& p : f.patch.entries) {
      std::memcpy(area_ + (p.addr - original_), p.replacement.data(), p.replacement.size());
      applied_.push_back(p);
    }
  flush_icache(area_, 2 * kArea);
  return std::move(*cache);
}

void AsmModule::unpatch() {
  for (const jit::EntryPatch& p : applied_) std::memcpy(area_ + (p.addr - original_), p.original.data(), p.original.size());
  applied_.clear();
  flush_icache(area_, kArea);
}

void AsmModule::write(uint64_t addr, std::span<const uint8_t> bytes) {
  ASSERT_TRUE(addr >= original_ && addr + bytes.size() <= original_ + 2 * kArea);
  std::memcpy(area_ + (addr - original_), bytes.data(), bytes.size());
  flush_icache(area_ + (addr - original_), bytes.size());
}

uint64_t AsmModule::copy_of(const jit::CodeCache& cache, uint64_t original) {
  for (const jit::CachedFunction& f : cache.functions)
    if (f.original_entry == original) return f.code.base;
  return 0;
}

}  // namespace dyni::test
