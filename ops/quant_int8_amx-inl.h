// Per-target part of ops/quant_matmul.cc: the quad tile of the 32-weight
// block types (QuadRowsTile, ops/quant_int8_panels-inl.h) with its block
// integers from Intel AMX tiles, where quant::int8_amx_enabled() (off by
// default: no faster on the machine measured, bench/results/amx_int8.md) and
// amx_int8_ready() (ops/cpu_amx.h).
//
// A quad panel block is already the second operand AMX asks for: eight rows
// (column quads) of 16 dwords (weight rows), four unsigned codes each. The
// first operand is 16 rows of x, one block's 32 signed codes each
// (PackAmxRows lays them out). One tdpbsud makes the 16 x 16 block integers
// that QuadRowsTile makes with 128 vpdpbusd; they are exact either way, so
// the floats that follow (the same expressions in the same order) are the
// same bits. Included by ops/quant_matmul.cc only, after
// quant_int8_rows-inl.h, for AVX-512 targets; the tile instructions are
// inline assembly (no target of Highway 1.0 enables them).
#if defined(HUBZOO_OPS_QUANT_INT8_AMX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_INT8_AMX_INL_H_
#undef HUBZOO_OPS_QUANT_INT8_AMX_INL_H_
#else
#define HUBZOO_OPS_QUANT_INT8_AMX_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "ops/cpu_amx.h"
#include "ops/quant_internal.h"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE && HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
HWY_DIAGNOSTICS(push)
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wmaybe-uninitialized")

// Rows of x per AMX tile (a tile's most rows); fewer take QuadRowsTile.
constexpr int kAmxRows = 16;

// Palette 1: tmm0-3 the half-block integers C (16 rows of x x 16 weight
// rows, int32), tmm4-5 a half block of the rows of x (A: 16 x 16 int8),
// tmm6-7 four column quads (B: 4 x 16 dwords). Block b uses C 2 (b % 2) and
// 2 (b % 2) + 1, one per half: a block's integers reach memory only once its
// tdpbsuds are done and the stores have retired, so the tiles run kAmxAhead
// blocks ahead of the floats that read them.
constexpr int kAmxSets = 2;
constexpr int64_t kAmxAhead = 1;

// Loads the palette into this thread's tile configuration (each range that uses the tiles).
inline void AmxConfigure() {
  AmxTileConfig c;
  for (int t = 0; t < 4; ++t) {
    c.rows[t] = kAmxRows;
    c.colsb[t] = 64;
  }
  for (int t : {4, 5}) {
    c.rows[t] = kAmxRows;
    c.colsb[t] = 16;
  }
  for (int t : {6, 7}) {
    c.rows[t] = 4;
    c.colsb[t] = 64;
  }
  c.load();
}

// Back to the initial state: the tile data is no longer saved on a switch.
inline void AmxRelease() { asm volatile("tilerelease" : : : "memory"); }

// C = x (signed) . codes (unsigned) for each half of one block into c
// (2 x 16 x 16 int32): x's 16 rows 32 bytes apart (the second half 16 bytes
// on), the eight quads 64 bytes apart (the second half's four 256 bytes on).
// The asm names the bytes it reads and writes rather than clobbering all
// memory, so that values the compiler keeps in memory need not be reloaded.
#define HUBZOO_AMX_BLOCK(C0, C1)                                                      \
  asm volatile("tilezero %%tmm" #C0                                                   \
               "\n\t"                                                                 \
               "tilezero %%tmm" #C1                                                   \
               "\n\t"                                                                 \
               "tileloadd (%1,%2,1), %%tmm4\n\t"                                      \
               "tileloadd (%3,%4,1), %%tmm6\n\t"                                      \
               "tdpbsud %%tmm6, %%tmm4, %%tmm" #C0                                    \
               "\n\t"                                                                 \
               "tileloadd (%5,%2,1), %%tmm5\n\t"                                      \
               "tileloadd (%6,%4,1), %%tmm7\n\t"                                      \
               "tdpbsud %%tmm7, %%tmm5, %%tmm" #C1                                    \
               "\n\t"                                                                 \
               "tilestored %%tmm" #C0                                                 \
               ", (%7,%4,1)\n\t"                                                      \
               "tilestored %%tmm" #C1 ", (%8,%4,1)"                                   \
               : "=m"(*reinterpret_cast<int32_t(*)[2 * kAmxRows * kPanelRows]>(c))    \
               : "r"(x), "r"(int64_t{32}), "r"(codes), "r"(int64_t{64}), "r"(x + 16), \
                 "r"(codes + 256), "r"(c), "r"(c + kAmxRows * kPanelRows),            \
                 "m"(*reinterpret_cast<const int8_t(*)[512]>(x)),                     \
                 "m"(*reinterpret_cast<const uint8_t(*)[512]>(codes)))
HWY_INLINE void AmxBlock(int set, const int8_t* x, const uint8_t* codes, int32_t* c) {
  if (set == 0) {
    HUBZOO_AMX_BLOCK(0, 1);
  } else {
    HUBZOO_AMX_BLOCK(2, 3);
  }
}
#undef HUBZOO_AMX_BLOCK

// Rows [r, r + 16 * groups) of x (row stride k) as groups of 16 rows, each
// block-major: a block's 16 x 32 codes contiguous (512 bytes, the tile's
// rows 32 bytes apart), so that a tile load reads 8 lines of one page rather
// than 16 lines k bytes apart.
HWY_INLINE void PackAmxRows(const int8_t* qx, int64_t k, int64_t groups, std::vector<int8_t>& out) {
  const int64_t nb = k / 32;
  out.resize(groups * nb * 512);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < kAmxRows; ++r) {
      const int8_t* row = qx + (g * kAmxRows + r) * k;
      int8_t* to = out.data() + g * nb * 512 + r * 32;
      for (int64_t b = 0; b < nb; ++b) std::memcpy(to + b * 512, row + b * 32, 32);
    }
  }
}

// QuadRowsTile for 16 rows of x: block b's codes of the 16 rows at
// xa + 512 * b (PackAmxRows); dx and start row r at + r * 2 * nb, jsum at
// + r * nb. The tiles must be configured (AmxConfigure).
template <bool kMin, bool kRowZ>
HWY_NOINLINE void QuadRowsAmx(const int8_t* xa, const float* dx, const int32_t* start,
                              const float* jsum, const QuadPanel& p, int64_t nb,
                              float (*out)[kPanelRows]) {
  alignas(64) int32_t c[kAmxSets][2 * kAmxRows * kPanelRows];
  __m512 acc[kAmxRows];
  for (int r = 0; r < kAmxRows; ++r) acc[r] = _mm512_setzero_ps();
  const uint8_t* u = p.u.get();
  for (int64_t b = 0; b < std::min(nb, kAmxAhead); ++b)
    AmxBlock(static_cast<int>(b), xa + b * 512, u + b * 512, c[b]);
  for (int64_t b = 0; b < nb; ++b) {
    // Block b + kAmxAhead's tiles first: they do not wait for these floats.
    if (const int64_t ahead = b + kAmxAhead; ahead < nb) {
      const int set = static_cast<int>(ahead % kAmxSets);
      AmxBlock(set, xa + ahead * 512, u + ahead * 512, c[set]);
    }
    const int32_t* cb = c[b % kAmxSets];
    const __m512 av = _mm512_loadu_ps(p.a.data() + b * kPanelRows);
    [[maybe_unused]] __m512 cv;
    if constexpr (kMin) cv = _mm512_loadu_ps(p.c.data() + b * kPanelRows);
    [[maybe_unused]] __m512i z;
    if constexpr (kRowZ) z = _mm512_loadu_si512(p.z.data() + b * kPanelRows);
#pragma GCC unroll 16
    for (int r = 0; r < kAmxRows; ++r) {
      // QuadRowsTile's integers per half: its start (times z), plus the dots.
      const auto half = [&](int h) {
        const __m512i s = _mm512_set1_epi32(start[r * 2 * nb + 2 * b + h]);
        return _mm512_cvtepi32_ps(
            _mm512_add_epi32(kRowZ ? _mm512_mullo_epi32(z, s) : s,
                             _mm512_load_si512(cb + (h * kAmxRows + r) * kPanelRows)));
      };
      const float* d = dx + r * 2 * nb + 2 * b;
      const __m512 t = _mm512_fmadd_ps(_mm512_set1_ps(d[1]), half(1),
                                       _mm512_mul_ps(_mm512_set1_ps(d[0]), half(0)));
      acc[r] = _mm512_fmadd_ps(av, t, acc[r]);
      if constexpr (kMin) acc[r] = _mm512_fmadd_ps(cv, _mm512_set1_ps(jsum[r * nb + b]), acc[r]);
    }
  }
  for (int r = 0; r < kAmxRows; ++r) _mm512_storeu_ps(out[r], acc[r]);
}

HWY_DIAGNOSTICS(pop)
#endif  // AVX-512

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
