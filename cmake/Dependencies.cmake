# Every third-party library comes from a Debian 12 package. A missing one stops
# configure with the name of the package to install.

function(dyni_require found package_name what)
  if(NOT ${found})
    message(FATAL_ERROR "dyni: ${what} not found. Install it with: apt-get install ${package_name}")
  endif()
endfunction()

find_package(zydis 4 QUIET CONFIG)
dyni_require(zydis_FOUND libzydis-dev "Zydis 4 (x86-64 decoder/encoder)")

find_package(LLVM 16 QUIET CONFIG PATHS /usr/lib/llvm-16/lib/cmake/llvm NO_DEFAULT_PATH)
dyni_require(LLVM_FOUND llvm-16-dev "LLVM 16 MC (assembler)")

find_package(GTest QUIET CONFIG)
dyni_require(GTest_FOUND googletest "GoogleTest")

find_package(nlohmann_json 3 QUIET CONFIG)
dyni_require(nlohmann_json_FOUND nlohmann-json3-dev "nlohmann JSON (control protocol)")

find_package(OpenSSL 3 QUIET COMPONENTS Crypto)
dyni_require(OpenSSL_FOUND libssl-dev "OpenSSL 3 libcrypto (Ed25519 license tokens)")

find_package(PkgConfig QUIET)
dyni_require(PkgConfig_FOUND pkg-config "pkg-config")
pkg_check_modules(INIH QUIET IMPORTED_TARGET inih)
dyni_require(INIH_FOUND libinih-dev "inih (INI config parser)")
pkg_check_modules(UNWIND_PTRACE QUIET IMPORTED_TARGET libunwind-ptrace libunwind-generic)
dyni_require(UNWIND_PTRACE_FOUND libunwind-dev "libunwind-ptrace (remote stack unwinding)")

find_package(Threads REQUIRED)

find_package(fmt 9 QUIET CONFIG)
dyni_require(fmt_FOUND libfmt-dev "{fmt} (formatting; GCC 12 has no <format>)")

# Tests only: a target with USDT probes (tests/programs/usdt_probes.cpp).
include(CheckIncludeFile)
check_include_file(sys/sdt.h HAVE_SYS_SDT_H)
dyni_require(HAVE_SYS_SDT_H systemtap-sdt-dev "sys/sdt.h (USDT probes in a test target)")
# Tests only: the seccomp filters of systemd units, built as systemd builds
# them (tests/programs/seccomp_exec.cpp).
pkg_check_modules(SECCOMP QUIET IMPORTED_TARGET libseccomp)
dyni_require(SECCOMP_FOUND libseccomp-dev "libseccomp (seccomp filters in test targets)")
