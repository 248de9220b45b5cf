// C++ exceptions and backtrace() through relocated code (I7), in-process:
// copies of throwing, catching, cleaning-up and rethrowing functions run
// from a buffer, with the .eh_frame the jit writes for them registered with
// this process's libgcc (__register_frame), as injection registers it in a
// target. Every copy must return what its original returns and run the same
// destructors, under several layouts; without the registration a throw
// through a copy ends in std::terminate.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <map>

#include "elf/eh_frame.h"
#include "jit/cache_eh_frame.h"
#include "jit/pipeline.h"
#include "tests/unit/this_binary.h"

extern "C" {
long jit_top(int);
long jit_catcher(int);
long jit_guards_destroyed();
int jit_backtrace_depth(int);
void __register_frame(void*);
void __deregister_frame(void*);
}

namespace dyni::jit {
namespace {

constexpr std::size_t kBufferSize = 4 << 20;
const std::vector<std::string> kThrowing = {"jit_thrower", "jit_catcher", "jit_passer", "jit_rethrower", "jit_top",
                                            "jit_backtrace_depth"};

class UnwindInProcess : public ThisBinary {
 protected:
  void SetUp() override {
    ThisBinary::SetUp();
    if (HasFatalFailure()) return;
    bias = reinterpret_cast<uint64_t>(&jit_top) - named("jit_top")->addr;
    uint64_t hint = (reinterpret_cast<uint64_t>(&jit_top) + (96 << 20)) & ~0xfffull;
    for (int i = 0; i < 64 && buffer == MAP_FAILED; ++i, hint += 4 << 20)
      buffer = mmap(reinterpret_cast<void*>(hint), kBufferSize, PROT_READ | PROT_WRITE | PROT_EXEC,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    ASSERT_NE(buffer, MAP_FAILED);
    const elf::Section* eh = file->find_section(".eh_frame");
    const elf::Section* except = file->find_section(".gcc_except_table");
    ASSERT_TRUE(eh && except);
    sources = {*file->contents(*eh), *file->contents(*except), except->addr, bias};
    auto fdes = elf::parse_eh_frame(sources.eh_frame, eh->addr);
    ASSERT_TRUE(fdes) << fdes.error().message();
    for (const elf::Fde& f : *fdes) fde_at[f.begin] = f;
  }
  void TearDown() override {
    if (registered) __deregister_frame(registered);
    if (buffer != MAP_FAILED) munmap(buffer, kBufferSize);
  }

  // Builds the cache of kThrowing into the buffer, and its .eh_frame after it.
  void build(uint64_t seed, bool leave_cold, bool register_frames = true) {
    ModuleInput input{table.get(), image.get(), nullptr, {}, reinterpret_cast<uint64_t>(buffer) - bias, {}, {}, 0};
    use_unwind_info(input, *file);
    for (const std::string& name : kThrowing) input.hot.push_back(named(name)->addr);
    JitOptions options;
    options.layout.shuffle_seed = seed;
    if (leave_cold) options.layout.cold = ColdBlocks::LeaveInOriginal;
    auto built = optimize_module(input, options);
    ASSERT_TRUE(built) << built.error().message();
    plan = std::make_unique<ModulePlan>(std::move(*built));
    ASSERT_EQ(plan->cache.functions.size(), kThrowing.size());
    std::vector<uint8_t> loaded = plan->cache.loaded_at(bias);
    std::memcpy(buffer, loaded.data(), loaded.size());
    std::vector<CopyFrames> copies;
    for (const CachedFunction& f : plan->cache.functions) {
      ASSERT_FALSE(f.unwind.empty());
      copies.push_back({&f.code, &f.unwind, &fde_at.at(f.original_entry)});
    }
    std::size_t blob_at = (plan->cache.bytes.size() + 63) & ~std::size_t{63};
    char* blob = static_cast<char*>(buffer) + blob_at;
    auto frames = write_cache_eh_frame(copies, sources, reinterpret_cast<uint64_t>(blob));
    ASSERT_TRUE(frames) << frames.error().message();
    ASSERT_LE(blob_at + frames->size(), kBufferSize);
    std::memcpy(blob, frames->data(), frames->size());
    __builtin___clear_cache(static_cast<char*>(buffer), blob);
    if (register_frames) {
      __register_frame(blob);
      registered = blob;
    }
  }

  template <typename Fn>
  Fn copy(const std::string& name) {
    for (const CachedFunction& f : plan->cache.functions)
      if (f.original_entry == named(name)->addr) return reinterpret_cast<Fn>(f.code.base + bias);
    return nullptr;
  }

  uint64_t bias = 0;
  void* buffer = MAP_FAILED;
  void* registered = nullptr;
  UnwindSources sources;
  std::map<uint64_t, elf::Fde> fde_at;
  std::unique_ptr<ModulePlan> plan;
};

void expect_same_under_exceptions(UnwindInProcess& t, long (*top)(int), const std::string& what) {
  for (int x = 0; x < 120; ++x) {
    long before = jit_guards_destroyed();
    long want = jit_top(x);
    long destroyed = jit_guards_destroyed() - before;
    long got = top(x);
    EXPECT_EQ(got, want) << what << " x=" << x;
    EXPECT_EQ(jit_guards_destroyed() - before - destroyed, destroyed) << what << " x=" << x << ": destructors";
  }
  (void)t;
}

TEST_F(UnwindInProcess, ExceptionsThrowCatchCleanUpAndRethrowThroughCopies) {
  for (uint64_t seed : {0, 1, 2, 3, 4, 5}) {
    build(seed, seed % 2 == 1);
    if (HasFatalFailure()) return;
    auto top = copy<long (*)(int)>("jit_top");
    ASSERT_NE(top, nullptr);
    expect_same_under_exceptions(*this, top, "seed " + std::to_string(seed));
    __deregister_frame(registered);
    registered = nullptr;
  }
}

TEST_F(UnwindInProcess, BacktraceSeesEveryCopiedFrame) {
  build(3, false);
  if (HasFatalFailure()) return;
  auto depth = copy<int (*)(int)>("jit_backtrace_depth");
  for (int n : {0, 1, 5, 20}) EXPECT_EQ(depth(n), jit_backtrace_depth(n)) << n;
}

// The registration is what makes it work: without it, the first throw
// through a copy finds no frame information and terminates the process.
TEST_F(UnwindInProcess, WithoutTheCachesFramesAThrowThroughACopyTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  build(0, false, false);
  if (HasFatalFailure()) return;
  auto catcher = copy<long (*)(int)>("jit_catcher");
  EXPECT_EQ(catcher(1), jit_catcher(1));  // no throw: fine
  EXPECT_DEATH(catcher(3), "");
}

}  // namespace
}  // namespace dyni::jit
