// bf16 weights in 12 bits each, losslessly: the exponent-coded panels that
// bf16 matrices use on AVX-512 CPUs (bf16_activations ones where the CPU has
// bf16 dot products, the others on the FMA kernel).
//
// A decode step streams every weight once, so its speed is bytes per token.
// The high byte of a bf16 weight (sign and the top 7 exponent bits) takes few
// values in a block of weights: SmolLM2-135M's 2048-weight blocks need at
// most 15 distinct high bytes for 99.7% of blocks, and 3 weights in a million
// fall outside their block's 15. Each weight is therefore stored as its low
// byte (the last exponent bit and the 7 mantissa bits) and a 4-bit code into a
// 16-entry table of its block: codes 0..14 name a high byte, kEscapeCode says
// "the next byte of the matrix's escape list". 12 bits instead of 16, 1.33x
// fewer bytes streamed, every bit kept: a coded matrix multiplies to exactly
// the bits of its plain bf16 panels (the same values, the same chain of
// matmul.h), and reading it back gives the same bf16 patterns.
//
// Layout, per panel of kPanel columns (column n of panel p is row p * kPanel + n
// of W) and kKBlock-long blocks of k, `kblocks` = ceil(K / kKBlock):
//   header: kblocks tables of 16 high bytes, then kblocks pairs of uint32
//           (index of the block's first escape in `escapes`, escape count),
//           zero-padded to a multiple of 64 bytes;
//   blocks: kblocks blocks of kCodedBlockBytes, for each two pairs of k's
//           (k0 + 4t, k0 + 4t + 1) and (k0 + 4t + 2, k0 + 4t + 3) 192 bytes: the
//           first pair's 64 low bytes, the second's, then 64 code bytes, the
//           first pair's code in the low nibble, the second's in the high one
//           (one stream per panel, read in order).
// Byte j (0..63) of a pair holds column 8 * (j / 16) + 4 * (j % 16 / 8) + j % 8 / 2
// at k = k0 + 2q + 1 - j % 2: vpunpcklbw / vpunpckhbw of the low bytes and the
// high bytes (vpshufb of the table by the codes) then give, per 128-bit lane,
// the (k, k + 1) word pairs of vdpbf16ps in the order ops/matmul_bf16_dot-inl.h
// multiplies them. Escapes are consumed in block order, pair by pair, byte
// position by byte position (vpexpandb). Weights past K and past n are +0.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace hubzoo {

struct MatmulArgs;
struct PackedMatrix;

constexpr int64_t kKBlockPairs = 32;  // pairs of k per block of matmul.h's kKBlock (64)

// Two pairs of k's (2t, 2t + 1) of a panel: their low bytes, then their codes.
constexpr int64_t kCodedQuadBytes = 3 * 64;
constexpr int64_t kCodedBlockBytes = kKBlockPairs / 2 * kCodedQuadBytes;  // 3072: 2048 weights
// Where pair q's 64 low bytes and 64 code bytes (q's in the low nibbles where
// q is even, else in the high ones) start in its block.
constexpr int64_t coded_low_at(int64_t q) { return q / 2 * kCodedQuadBytes + q % 2 * 64; }
constexpr int64_t coded_codes_at(int64_t q) { return q / 2 * kCodedQuadBytes + 128; }
constexpr uint8_t kEscapeCode = 15;

struct CodedBf16 {
  int64_t kblocks = 0;
  int64_t header_bytes = 0;  // 64-byte multiple
  int64_t panel_bytes = 0;   // header_bytes + kblocks * kCodedBlockBytes
  std::unique_ptr<uint8_t[], void (*)(uint8_t*)> data{nullptr, nullptr};  // 64-byte aligned
  std::vector<uint8_t> escapes;  // high bytes of the escaped weights

  const uint8_t* panel(int64_t p) const { return data.get() + p * panel_bytes; }
  const uint8_t* table(int64_t p, int64_t b) const { return panel(p) + b * 16; }
  const uint32_t* escape_info(int64_t p, int64_t b) const {  // {first, count}
    return reinterpret_cast<const uint32_t*>(panel(p) + kblocks * 16) + 2 * b;
  }
  const uint8_t* block(int64_t p, int64_t b) const {
    return panel(p) + header_bytes + b * kCodedBlockBytes;
  }
  int64_t bytes(int64_t panels) const {
    return panels * panel_bytes + static_cast<int64_t>(escapes.size());
  }
};

// Byte position in a pair of the weight of column c (0..kPanel) at k = k0 + 2q + dk.
constexpr int coded_position(int64_t c, int64_t dk) {
  return static_cast<int>(16 * (c / 8) + 8 * (c % 8 / 4) + 2 * (c % 4) + (1 - dk));
}

// `p` (bf16 weights in plain panels, bf16_activations or not) coded, where that
// pays: a matrix with more than one weight in 64 escaping (weights no
// language model has, e.g. random bit patterns) or too short a K to save
// bytes (the last k block is stored whole; tests of short K's pass
// only_if_smaller false) stays as it is, as does any other matrix. The
// values, and every product with them, are unchanged.
PackedMatrix to_bf16_coded(PackedMatrix p, bool only_if_smaller = true);
// A coded matrix as plain bf16 panels (any other matrix: an InvalidArgument).
PackedMatrix from_bf16_coded(const PackedMatrix& p);
// The bf16 bits of W[row, col] / of W[row, :] of a coded matrix.
uint16_t coded_at(const PackedMatrix& p, int64_t row, int64_t col);
void coded_row(const PackedMatrix& p, int64_t row, uint16_t* out);
// Panels [p0, p1) as plain bf16 panels (matmul.h's layout, K * kPanel words
// per panel) at out.
void coded_panels(const PackedMatrix& p, int64_t p0, int64_t p1, uint16_t* out);

// Rows [r0, r1) x panels [p0, p1) of a coded matrix through plain bf16
// panels: groups of panels decoded into a per-thread buffer, each multiplied
// by tile(args, r0, r1, 0, panels) as a plain matrix (the same values, so the
// same bits). Where no coded kernel runs (bf16_activations without the bf16
// dot products, a switch for tests; any coded matrix below AVX-512; the
// loader codes matrices only where one does) and in matmul_reference.
using PlainTile = void (*)(const MatmulArgs&, int64_t, int64_t, int64_t, int64_t);
void coded_through_plain(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
                         PlainTile tile);

}  // namespace hubzoo
