// Internals shared by ops/quant_blocks.cc (formats, reference) and
// ops/quant_matmul.cc (kernels): fp16 conversion, the int8-mode decoding of a
// weight block and the int8 quantization of activations. Not installed API.
#pragma once

#include <bit>
#include <cstdint>

#include "ops/quant.h"

namespace hubzoo::quant {

// IEEE binary16 -> float32 (exact, as numpy's astype(float32) and F16C).
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float32.
  const float v = static_cast<float>(mant) * 0x1p-24f;
  return sign ? -v : v;
}

// float32 -> binary16, round to nearest even (numpy's astype(float16), ggml's
// GGML_FP32_TO_FP16 on F16C); overflow to inf, NaN stays a quiet NaN.
inline uint16_t float_to_fp16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t o;
  if (x >= (143u << 23)) {  // >= 65536 (or inf / NaN)
    o = x > 0x7F800000u ? 0x7E00u | ((x >> 13) & 0x3FFu) : 0x7C00u;
  } else if (x < (113u << 23)) {  // below 2^-14: subnormal half, rounded by a float add
    constexpr uint32_t kMagic = ((127 - 15) + (23 - 10) + 1) << 23;
    const float v = std::bit_cast<float>(x) + std::bit_cast<float>(kMagic);
    o = std::bit_cast<uint32_t>(v) - kMagic;
  } else {
    const uint32_t odd = (x >> 13) & 1u;
    x += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFu + odd;
    o = x >> 13;
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

// Quantizes one 256-float block of a K type with llama.cpp's reference
// quantizer (ops/quant_quantize_k.cc); false for the types it does not cover.
bool quantize_k_block(QuantType t, const float* x, uint8_t* block);

inline uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline float load_fp16(const uint8_t* p) { return fp16_to_float(load_u16(p)); }

// ---- int8 mode (quant.h) ------------------------------------------------
//
// Decoding: a weight block of B = block_elems weights (32, or 256 for the K
// types) is read as integers q[B] in groups of 16 with integer coefficients
// per group and two float scales a and c: w ~ a * (sc[g] * q + off[g]) +
// c * mn[g] (c and mn only for the types with a min). The kernels use it
// widened: w16[l] = sc[g] * q[l] + off[g] and mn16[l] = mn[g] (int16: at
// most 32 * 128 in magnitude), per block a and c.
constexpr int kMaxGroups = 16;

struct Int8Block {
  int8_t q[256];
  int32_t sc[kMaxGroups];
  int32_t off[kMaxGroups];
  int32_t mn[kMaxGroups];
  float a = 0.0f;
  float c = 0.0f;
};

// Whether the int8 mode of t has the c * mn term (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K).
bool int8_has_min(QuantType t);
// Block `block` of type t read as above (groups = block_elems / 16).
void decode_int8(QuantType t, const uint8_t* block, Int8Block* out);
// The widened form: w16[B], mn16[B] (may be null for types without a min), a, c.
struct Int8Wide {
  int16_t* w16;
  int16_t* mn16;
  float* a;
  float* c;
};
void decode_int8_wide(QuantType t, const uint8_t* block, Int8Wide out);

// The int8 mode's activation blocks. Against the K types every row of x is
// quantized per kXBlock = 32 floats, so each 32 columns of a K block meet
// their own activation scale (llama.cpp's Q8_K takes one per 256: about twice
// the int8 error on Gemma-3-270M, whose ffn_down inputs have outliers).
// Against the 32-weight block types, per kXHalf = 16 floats: one scale per
// half block (llama.cpp's Q8_0 activations take one per 32; on SmolLM2 that
// activation rounding was two thirds of the int8 error of its Q8_0 file, and
// halving the block halves it, bench/results/int8_act_blocks_smollm2.md).
// docs/architecture.md, "Quantized weights".
constexpr int64_t kXBlock = 32;
constexpr int64_t kXHalf = 16;
// The activation block against weights in blocks of `weight_block` elements.
constexpr int64_t x_block_of(int64_t weight_block) { return weight_block == 32 ? kXHalf : kXBlock; }

// An activation row quantized per block of B floats: qx[k], dx[k / B].
// dx = amax / 127; qx = nearest-even of x * (1 / dx) clamped to [-127, 127]
// (0 for an all-zero block, and where x * (1 / dx) is NaN).
struct Int8Row {
  int8_t* qx;
  float* dx;
};
void quantize_activations(const float* x, int64_t k, int64_t block, Int8Row out);

// Weight rows per panel of the int8 kernels of the 32-weight block types (and
// of QuantMatrix::panels, quant.h): one per lane of their 16-float vectors.
constexpr int64_t kPanelRows = 16;

// Blocks [b0, b0 + nb) of row r read back from w.panels (unchecked: the
// caller has panels, r < n and the blocks in the row).
void panel_row_range(const QuantMatrix& w, int64_t r, int64_t b0, int64_t nb, uint8_t* out);

// Whether the int8 kernels may use AVX512-VNNI where the CPU has it (default
// true); tests turn it off to cover the vpmaddwd path on such a CPU.
bool int8_vnni_allowed();
void set_int8_vnni_allowed(bool allowed);
// Whether the int8 mode's tiled path for the 32-weight types takes the
// block integers of groups of 16 rows of x from AMX tiles where
// amx_int8_ready() (ops/cpu_amx.h). Default false: on the one AMX machine
// measured (Xeon, 2 cores) it was no faster than the vpdpbusd tile
// (bench/results/amx_int8.md); tests turn it on to keep it the same bits,
// bench/quant_matmul_bench --amx to time it on another machine.
bool int8_amx_enabled();
void set_int8_amx_enabled(bool enabled);
// How many 16-row AMX tiles the int8 kernels have run in this process (tests
// check that the tiles are reached where the CPU has them).
int64_t int8_amx_tiles();
void count_int8_amx_tile();
// Whether the int8 mode may take the fused few-rows kernels (default true);
// tests and bench/quant_matmul_bench turn it off to cover / time the tiled path.
bool int8_fused_allowed();
void set_int8_fused_allowed(bool allowed);
// Into how many runs, read at once, a decode step (one row of x) splits a
// thread's range of panels: default 3 (decode 1.11x on SmolLM2 Q4_0, 1.12x
// on Qwen2.5-0.5B Q4_K_M, 1.16x on Gemma-3-270M Q4_K_M against 1, on Zen 2;
// 4 and 5 were no faster, 7 and 8 slower in the kernels), but 1 on AMD's
// AVX-512 cores (quant_blocks.cc, DefaultDecodeReads). 1 reads the range
// front to back as one stream (bench/quant_matmul_bench --one-stream times
// it beside the default). The types with a min (Q4_1, Q5_1) take two at
// most. The AVX2 kernels and the 32-weight types' VNNI kernel read streams;
// the K types' VNNI kernel one. Clamped to 1 .. kMaxDecodeStreams.
constexpr int kMaxDecodeStreams = 8;
int int8_decode_streams();
void set_int8_decode_streams(int streams);
// Whether the kernels over 32-weight panels for one row of x (a decode step
// at batch 1: the VNNI ones and the AVX2 streams) prefetch each stream in
// software, kPanelAhead blocks ahead: default true, but false on AMD's
// AVX-512 cores, whose hardware prefetchers read one stream faster alone
// (quant_blocks.cc). Results never depend on it.
bool int8_decode_prefetch();
void set_int8_decode_prefetch(bool prefetch);
// A long piece of a decode step's 32-weight panels on AVX2 (a thread's claim of at
// least int8_long_piece_bytes(), default 4 MiB: an lm_head's, not a layer's
// products in the models measured) is read as kLongPieceStreams runs with no
// software prefetch: on huge pages the hardware prefetchers keep seven long
// streams going, and prefetch instructions on top of seven streams slowed
// them. Zen 2, 2 threads: Gemma-3-270M's 262144x640 Q8_0 lm_head 5.75 ->
// 4.72 ms, Qwen2.5-0.5B's 151936x896 4.04 -> 3.32 ms. Shorter pieces keep
// int8_decode_streams() and the prefetch (their streams are too short for
// the hardware to find). INT64_MAX turns it off.
constexpr int kLongPieceStreams = 7;
int64_t int8_long_piece_bytes();
void set_int8_long_piece_bytes(int64_t bytes);

// The int8-mode order (quant.h), in scalar code, x quantized per
// x_block_of(block). The K types (block 256): one float chain from 0.0f over
// the kXBlock-column chunks in k order; per chunk s, exact integers
// I = sum over its columns of w16 * qx (J the same with mn16), then
// acc = fma(a * dx[s], float(I), acc) and, with a min,
// acc = fma(c * dx[s], float(J), acc), with a and c those of the weight
// block holding the chunk. The 32-weight types: one chain over the blocks;
// per block b, the exact integers I0, I1 (J0, J1) of its two halves, then
// acc = fma(a, fma(dx[2b + 1], float(I1), dx[2b] * float(I0)), acc) and, with
// a min, acc = fma(c, fma(dx[2b + 1], float(J1), dx[2b] * float(J0)), acc).
// No lanes: a kernel keeps one output per vector lane (ops/quant_int8_rows-inl.h,
// ops/quant_int8_kpanels-inl.h) or reduces a chunk's integers first. Then + bias.
float int8_block_dot(const Int8Row& x, const int16_t* w16, const int16_t* mn16, const float* a,
                     const float* c, int64_t k, int64_t block);

// The exact-mode per-element order of quant.h, in scalar code: 16 lane chains
// (lane = column mod 16) with std::fma, reduced by the fixed tree.
float exact_lane_dot(const float* x, const float* w, int64_t k);
inline float lane_tree(const float* acc) {
  float s8[8], s4[4], s2[2];
  for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
  return s2[0] + s2[1];
}

}  // namespace hubzoo::quant
