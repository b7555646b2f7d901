#include "ops/cpu_amx.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#endif

namespace hubzoo {
namespace {

#if defined(__x86_64__) && defined(__linux__)
constexpr unsigned kTile = 1u << 24, kInt8 = 1u << 25, kBf16 = 1u << 22;  // CPUID.7.0:EDX

// The tile state, asked of Linux once for the whole process.
bool tile_state_granted() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & kTile)) return false;
  unsigned lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
  if ((lo & kTileState) != kTileState) return false;
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

bool ask(unsigned features) {
  static const bool granted = tile_state_granted();
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || (d & features) != features) return false;
  return granted;
}
#else
constexpr unsigned kInt8 = 0, kBf16 = 0;
bool ask(unsigned) { return false; }
#endif

}  // namespace

bool amx_int8_ready() {
  static const bool ready = ask(kInt8);
  return ready;
}

bool amx_bf16_ready() {
  static const bool ready = ask(kBf16);
  return ready;
}

}  // namespace hubzoo
