// Whether this process may run Intel AMX tile instructions (AMX-TILE with
// AMX-INT8, or with AMX-BF16): the CPU has them (CPUID leaf 7), the OS saves their state
// (XCR0 bits 17 and 18), and Linux granted this process the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once for the whole process; a
// thread that ran a tile instruction without it would die of SIGILL).
// Answered once, then cached. False on other CPUs and systems.
#ifndef HUBZOO_OPS_CPU_AMX_H_
#define HUBZOO_OPS_CPU_AMX_H_

#include <cstdint>

namespace hubzoo {

bool amx_int8_ready();
bool amx_bf16_ready();

// The 64 bytes ldtilecfg reads: palette 1, then per tile (tmm0-7) its bytes
// per row and its rows (unused tiles 0). load() makes it this thread's tile
// configuration; each user loads its own, as other code on the thread may
// have loaded another.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
#if defined(__x86_64__)
  void load() const { asm volatile("ldtilecfg %0" : : "m"(*this) : "memory"); }
#endif
};

}  // namespace hubzoo

#endif  // HUBZOO_OPS_CPU_AMX_H_
