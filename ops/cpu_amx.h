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
  // Loads tmm0-7 as 16 rows x 64 bytes each: the shape every bf16 tile
  // product here uses (16 rows of 32 bf16, 16 pairs x 16 columns, 16 x 16 floats).
  static void load_16x64() {
    AmxTileConfig c;
    for (int t = 0; t < 8; ++t) c.rows[t] = 16, c.colsb[t] = 64;
    c.load();
  }
#endif
};

#if defined(__x86_64__)
// One 32-k block of the bf16 tile product (ops/matmul_bf16_amx-inl.h, and
// bench/amx_bf16_loop, which times it alone), tiles configured 16 rows x 64
// bytes: tmm0 / tmm1 += the 16 rows of x at `a` (rows a_stride bytes apart,
// 32 bf16 each) times a panel's column halves at w and w + 32 (16 pairs of
// k, rows 128 bytes apart); with kTwo also tmm2 / tmm3 += the rows at a2.
// Uses tmm4-7 for the operands.
template <bool kTwo>
inline void amx_bf16_block(const uint16_t* a, const uint16_t* a2, int64_t a_stride,
                           const uint16_t* w) {
  const int64_t ws = 128;
  if constexpr (kTwo) {
    asm volatile(
        "tileloadd (%[w],%[ws],1), %%tmm6\n\t"
        "tileloadd (%[w2],%[ws],1), %%tmm7\n\t"
        "tileloadd (%[a],%[as],1), %%tmm4\n\t"
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\t"
        "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
        "tileloadd (%[a2],%[as],1), %%tmm5\n\t"
        "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\t"
        "tdpbf16ps %%tmm7, %%tmm5, %%tmm3"
        :
        : [w] "r"(w), [w2] "r"(w + 32), [ws] "r"(ws), [a] "r"(a), [a2] "r"(a2), [as] "r"(a_stride)
        : "memory");
  } else {
    (void)a2;
    asm volatile(
        "tileloadd (%[w],%[ws],1), %%tmm6\n\t"
        "tileloadd (%[w2],%[ws],1), %%tmm7\n\t"
        "tileloadd (%[a],%[as],1), %%tmm4\n\t"
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\t"
        "tdpbf16ps %%tmm7, %%tmm4, %%tmm1"
        :
        : [w] "r"(w), [w2] "r"(w + 32), [ws] "r"(ws), [a] "r"(a), [as] "r"(a_stride)
        : "memory");
  }
}
#endif

}  // namespace hubzoo

#endif  // HUBZOO_OPS_CPU_AMX_H_
