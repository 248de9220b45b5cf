// Reading `.note.stapsdt` (usdt.h). A note: namesz, descsz, type (3), the
// name "stapsdt", then the desc: the probe's pc, the link-time address of
// `.stapsdt.base`, the semaphore's address, and three NUL-terminated
// strings (provider, name, arguments). A prelinked file moved its code but
// not its notes: the pc is then off by where `.stapsdt.base` is now less
// the address the note recorded.
#include "elf/usdt.h"

#include <elf.h>
#include <fmt/format.h>

#include <algorithm>

#include "elf/byte_reader.h"

namespace dyni::elf {
namespace {

constexpr uint32_t kNtStapsdt = 3;
constexpr char kOwner[] = "stapsdt";

std::size_t aligned4(std::size_t n) { return (n + 3) & ~std::size_t{3}; }

// One note's desc; `base_now`: where .stapsdt.base is, if anywhere (the note recorded where it was).
Result<UsdtProbe> read_probe(std::span<const uint8_t> desc, const Section* base_now) {
  ByteReader r(desc);
  auto pc = r.read<uint64_t>(), base = r.read<uint64_t>(), semaphore = r.read<uint64_t>();
  auto provider = r.cstring(), name = provider ? r.cstring() : std::nullopt;
  if (!pc || !base || !semaphore || !provider || !name) return fail("a .note.stapsdt note is cut short");
  if (provider->empty() || name->empty()) return fail("a .note.stapsdt note has no provider or name");
  UsdtProbe p{*provider, *name, *pc, *semaphore};
  if (base_now && *base != 0) {
    const uint64_t moved = base_now->addr - *base;
    p.pc += moved;
    if (p.semaphore) p.semaphore += moved;
  }
  return p;
}

}  // namespace

Result<std::vector<UsdtProbe>> usdt_probes(const ElfFile& file) {
  std::vector<UsdtProbe> out;
  const Section* notes = file.find_section(".note.stapsdt");
  if (!notes) return out;
  if (notes->type != SHT_NOTE) return fail(".note.stapsdt is not a note section");
  const Section* base_now = file.find_section(".stapsdt.base");
  auto bytes = file.contents(*notes);
  if (!bytes) return std::unexpected(bytes.error());
  ByteReader r(*bytes);
  while (r.pos() < r.size()) {
    auto namesz = r.read<uint32_t>(), descsz = r.read<uint32_t>(), type = r.read<uint32_t>();
    if (!namesz || !descsz || !type) return fail(fmt::format(".note.stapsdt: a note header is cut short at {}", r.pos()));
    const std::size_t name_at = r.pos();
    if (!r.skip(aligned4(*namesz))) return fail(".note.stapsdt: a note's name runs past the section");
    const std::size_t desc_at = r.pos();
    if (!r.skip(*descsz)) return fail(".note.stapsdt: a note's desc runs past the section");
    if (r.pos() < r.size() && !r.skip(aligned4(*descsz) - *descsz)) return fail(".note.stapsdt: bad note padding");
    const bool stapsdt = *namesz == sizeof kOwner &&
                         std::equal(kOwner, kOwner + sizeof kOwner, bytes->begin() + static_cast<std::ptrdiff_t>(name_at));
    if (!stapsdt || *type != kNtStapsdt) continue;  // another owner's note: not a probe
    auto probe = read_probe(bytes->subspan(desc_at, *descsz), base_now);
    if (!probe) return std::unexpected(probe.error());
    out.push_back(std::move(*probe));
  }
  return out;
}

}  // namespace dyni::elf
