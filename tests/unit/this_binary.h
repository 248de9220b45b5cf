// The test binary itself as jit/ sees it: ELF file, function table, image.
// Shared by the tests that analyse or relocate real compiled functions.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "elf/elf_file.h"
#include "elf/function_table.h"
#include "jit/module_image.h"

namespace dyni::jit {

class ThisBinary : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = elf::ElfFile::open("/proc/self/exe");
    ASSERT_TRUE(f) << f.error().message();
    file = std::make_unique<elf::ElfFile>(std::move(*f));
    auto t = elf::FunctionTable::build(*file);
    ASSERT_TRUE(t) << t.error().message();
    table = std::make_unique<elf::FunctionTable>(std::move(*t));
    image = std::make_unique<ModuleImage>(*file);
  }
  const elf::Function* named(const std::string& name) const {
    for (const auto& f : table->functions())
      if (f.name == name) return &f;
    return nullptr;
  }
  std::unique_ptr<elf::ElfFile> file;
  std::unique_ptr<elf::FunctionTable> table;
  std::unique_ptr<ModuleImage> image;
};

}  // namespace dyni::jit
