// Whether this process may run Intel AMX tile instructions (AMX-TILE with
// AMX-INT8, or with AMX-BF16): the CPU has them (CPUID leaf 7), the OS saves their state
// (XCR0 bits 17 and 18), and Linux granted this process the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once for the whole process; a
// thread that ran a tile instruction without it would die of SIGILL).
// Answered once, then cached. False on other CPUs and systems.
#ifndef HUBZOO_OPS_CPU_AMX_H_
#define HUBZOO_OPS_CPU_AMX_H_

namespace hubzoo {

bool amx_int8_ready();
bool amx_bf16_ready();

}  // namespace hubzoo

#endif  // HUBZOO_OPS_CPU_AMX_H_
