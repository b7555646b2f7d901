// Block-quantized weights in memory and their products with fp32 activations.
//
// A QuantMatrix is [n, k] in GGML's row layout (tensor/quant_type.h): row r
// is k / block_elems blocks at data + r * row_bytes. The bytes may point into
// a mapped file (zero-copy) or be owned. Nothing is ever dequantized to a
// full matrix: kernels decode 4 rows x 512 columns at a time into an L1
// buffer, reused by every row of x in a chunk of 32 (ops/quant_matmul.cc);
// the int8 mode reads Q4_K/Q5_K/Q6_K blocks straight into byte registers for
// at most 16 rows of x on AVX-512 (ops/quant_int8_fused-inl.h), and the
// 32-weight block types either straight from the blocks (at most 4 rows of
// x) or from a panel of 16 weight rows packed per call
// (ops/quant_int8_rows-inl.h), all in the same orders. With AVX512-VNNI an
// int8 load also keeps Q4_0 .. Q8_0, Q2_K .. Q6_K, Q4_G and Q8_G matrices
// with 16 rows interleaved (QuantMatrix::panels, the panel layouts below), which their
// kernels then read instead of the rows (ops/quant_int8_panels-inl.h,
// ops/quant_int8_kpanels-inl.h).
// Q4_G nibbles are ordered as Q4_0's: byte j holds element j (low nibble)
// and element j + 16 (high nibble).
//
// Two numerics (docs/architecture.md, "Quantized weights"):
// - exact (the default): activations stay fp32 and multiply the weights
//   dequantized exactly as dequantize_row() gives them (bit for bit gguf-py's
//   dequantize, i.e. what transformers loads from the same file).
// - int8 activations (QuantMode::kInt8): each activation row is quantized
//   to int8 with an fp32 scale dx = amax / 127 (q = nearest-even of x / dx)
//   per 16 columns against the 32-weight block types and per 32 against the
//   K types, integer dot products per activation block, accumulated in fp32.
//   llama.cpp takes one scale per 32 (Q8_0) and per 256 for the K types
//   (Q8_K); hubzoo's finer blocks halve the activations' share of the error
//   (quant_internal.h, kXHalf and kXBlock).
//
// Batch invariance (docs/design.md): in both modes every output element is
// reduced in one fixed order that does not depend on m, on the tiling, on the
// thread count or on the SIMD target: quant_matmul() equals
// quant_matmul_reference() bit for bit on every target. The orders:
// - exact: 16 float lanes, lane L owning the columns j with j mod 16 == L;
//   each lane is one std::fma chain acc = fma(x[j], w[j], acc) over its
//   columns in k order from 0.0f. The lanes are then added by a fixed tree
//   (s8[l] = a[l] + a[l+8], s4[l] = s8[l] + s8[l+4], s2[l] = s4[l] + s4[l+2],
//   s2[0] + s2[1]) and bias is added last. An AVX-512 vector is the 16 lanes,
//   AVX2 holds them in two vectors.
// - int8: weights read as integers w16 with per-block float scales a (and c
//   with per-group integers mn16 for the types with a min, see
//   ops/quant_internal.h). One float chain per output in k order from 0.0f,
//   then + bias. The K types: over 32-column chunks; per chunk s, exact int32
//   sums I = sum w16 * qx and J = sum mn16 * qx over the chunk, then
//   acc = fma(a * dx[s], float(I), acc) and, with a min,
//   acc = fma(c * dx[s], float(J), acc), a and c those of the weight block
//   holding the chunk (llama.cpp's order per 32-weight block). The 32-weight
//   types: over the blocks; per block b, the sums I0, I1 (J0, J1) of its two
//   halves, then acc = fma(a, fma(dx[2b + 1], float(I1), dx[2b] * float(I0)), acc)
//   and, with a min, the same with c and J. Integer sums have no order, so a
//   kernel may form them in any grouping: one output per vector lane (the
//   panel kernels), or lanes of partial sums added up per chunk (the row kernels).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ops/thread_pool.h"
#include "ops/weight_arena.h"
#include "tensor/quant_type.h"

namespace hubzoo {

enum class QuantMode : uint8_t { kExact, kInt8 };

struct QuantMatrix {
  QuantType type = QuantType::Q8_0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t row_bytes = 0;             // quant_row_bytes(type, k)
  const uint8_t* data = nullptr;     // n * row_bytes bytes
  std::shared_ptr<const void> keep;  // owns `data` (or keeps its mapping alive); may be null
  // Optional input permutation (GPTQ desc_act): the product uses
  // x[k_perm[j]] as column j's input. Empty: identity.
  std::vector<int32_t> k_perm;
  // Optional row order: row r is stored row row_order[r] of `data`, every
  // entry in [0, n) (a GGUF's q/k rows in transformers' order without a
  // reordered copy; the loader only sets it where it also attaches panels,
  // which hold the rows in this order). Empty: identity.
  std::vector<int32_t> row_order;

  // Optional: the same blocks interleaved 16 rows at a time (the panel layout
  // below), which the int8 kernels read instead of the rows on AVX512-VNNI.
  // Null: rows only. The rows stay valid either way (the other kernels read
  // them), so a loader may release their resident pages once panels exist;
  // dequantize_row reads a row from the panels then.
  std::shared_ptr<const uint8_t[]> panels;

  int64_t bytes() const { return n * row_bytes; }
  const uint8_t* row(int64_t r) const {
    return data + (row_order.empty() ? r : row_order[r]) * row_bytes;
  }
  // W[r, :] dequantized exactly (columns in stored order, k_perm not applied),
  // from the panels where w has them (an embedding lookup of a tied matrix
  // then never brings the released rows' pages back).
  void dequantize_row(int64_t r, float* out) const;
  // The whole matrix as the products see it, [n, k] into out: row r's stored
  // column j at input column k_perm[j] (summed, should two read one input).
  void dequantize(float* out) const;
};

// Dequantizes `k` weights (a whole number of blocks) of type t, exactly as
// gguf-py's quants.dequantize computes them in float32.
void dequantize_row(QuantType t, const void* blocks, float* out, int64_t k);
// Quantizes `k` floats (a whole number of blocks) to type t with llama.cpp's
// reference quantizer (quantize_row_*_ref); bytes equal gguf-py's
// quants.quantize where gguf-py implements the type. Throws InvalidArgument
// for types without a quantizer here.
void quantize_row(QuantType t, const float* x, void* blocks, int64_t k);
// Whether quantize_row implements t (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K).
bool can_quantize(QuantType t);

// The panel layouts: rows 16p .. 16p + 15 (rows past n zero) are panel p,
// and block b of its rows is 16 * block_bytes bytes at
// ((p * (k / block_elems)) + b) * 16 * block_bytes. The 32-weight GGML types
// Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0:
//   d[16] (fp16, row l's scale), then m[16] (fp16, Q4_1 / Q5_1's min), then
//   (Q5) 64 bytes of bit planes: byte 4l + i has bit v < 4 = row l's high bit
//   of element 4v + i, bit 4 + v that of element 16 + 4v + i (a byte's bits
//   one shift from the fifth bit of its 8 codes); then the codes:
//   4-bit types: four 64-byte vectors, vector v holding at bytes 4l .. 4l + 3
//   row l's qs[4v .. 4v + 3] (low nibble element 4v + i, high 16 + 4v + i);
//   Q8_0: eight 64-byte vectors, vector q holding at byte 4l + i row l's
//   element 4q + i plus 128 (unsigned).
// Q4_G and Q8_G (the Hub's GPTQ / AWQ / compressed-tensors groups): s[16]
//   (fp32, row l's scale) at 0, the 16 rows' int8 zeros at 64, row l's three
//   pad bytes at 80 + 3l, then at 128 the codes as Q4_0's (Q4_G) or Q8_0's
//   (Q8_G, element plus 128).
// The K types Q2_K .. Q6_K: their fp16 fields as 16 halves (row l's at
// 2l), and their byte arrays as runs of 64-byte vectors, vector w of a run
// holding at bytes 4l .. 4l + 3 row l's bytes 4w .. 4w + 3 of the array:
//   Q2_K: d at 0, dmin at 32, scales[16] 4 vectors at 64, qs[64] 16 at 320;
//   Q3_K: d at 0, scales[12] 3 vectors at 32, hmask[32] 8 at 224, qs[64]
//         16 at 736;
//   Q4_K: d at 0, dmin at 32, scales[12] 3 vectors at 64, qs[128] 32 at 256;
//   Q5_K: d at 0, dmin at 32, scales 3 vectors at 64, qh[32] 8 at 256,
//         qs 32 at 768;
//   Q6_K: d at 0, scales[16] 4 vectors at 32, then per quarter p = 2h + qq
//         (h, qq in 0..1) at 288 + 768p: qh vectors 8h + 4qq .. + 3, ql
//         vectors 16h + 4qq .. + 3, ql vectors 16h + 8 + 4qq .. + 3 (the
//         order the kernel reads them: one sequential stream).
// The same bytes as the rows (16 block_bytes per block of a panel), read as
// one sequential stream with no gather or transposition per block.
constexpr bool quant_has_panel_layout(QuantType t) {
  return t == QuantType::Q4_0 || t == QuantType::Q4_1 || t == QuantType::Q5_0 ||
         t == QuantType::Q5_1 || t == QuantType::Q8_0 || t == QuantType::Q2_K ||
         t == QuantType::Q3_K || t == QuantType::Q4_K || t == QuantType::Q5_K ||
         t == QuantType::Q6_K || t == QuantType::Q4_G || t == QuantType::Q8_G;
}
// Bytes of w's panels: ceil(n / 16) * 16 * row_bytes.
int64_t quant_panel_bytes(const QuantMatrix& w);
// w.panels made from w's rows (a type with a panel layout). `read`, if set,
// is called as the rows are read, with the count read so far (every 1024
// rows, and n at the end): a loader drops their pages as it goes, so that
// the rows and the panels of a large matrix are never all resident at once.
// The panels are allocated in `arena` when given (a loader's, whose memory
// becomes huge pages after the load: ops/weight_arena.h), else on the heap.
void attach_panels(QuantMatrix& w, const std::function<void(int64_t rows)>& read = {},
                   WeightArena* arena = nullptr);
// Row r's blocks (row_bytes bytes, as the rows hold them) read back from
// w.panels.
void panel_row_blocks(const QuantMatrix& w, int64_t r, uint8_t* out);
// Whether this CPU's int8 kernels read panels of type t (a type with a
// panel layout, on AVX2 or any AVX-512 target: the VNNI kernels, else the
// 256-bit ones): a loader makes panels only then.
bool quant_reads_panels(QuantType t);

// An owned QuantMatrix quantized from row-major fp32 W [n, k].
//
// kQuantizerRevision names what the quantizers compute: the quantize-on-load
// cache (io/quant_cache.h) keys its entries by it, so any change to the bytes
// any quantizer writes must come with a new revision, or a cache would hand
// out the old bytes. The test QuantizerRevision.CoversEveryQuantizer holds a
// digest of every quantizer's output on fixed inputs for this revision and
// fails, asking for both to be updated, when the output moves.
constexpr uint32_t kQuantizerRevision = 1;
QuantMatrix quantize_matrix(QuantType t, const float* w, int64_t n, int64_t k, ThreadPool& pool);
// The same bytes, W read kQuantizeChunkFloats at a time (whole rows) through
// read(r0, r1, out), out holding (r1 - r0) * k floats: a loader converting
// stored weights never holds a large matrix as floats all at once (SmolLM2's
// embedding is 113 MB of them).
constexpr int64_t kQuantizeChunkFloats = int64_t{1} << 20;
QuantMatrix quantize_matrix_chunked(QuantType t, int64_t n, int64_t k,
                                    const std::function<void(int64_t, int64_t, float*)>& read,
                                    ThreadPool& pool);
// Rows of several matrices (same type and k, no k_perm) stacked into one owned matrix.
QuantMatrix concat_quant(const std::vector<const QuantMatrix*>& parts);
// Rows reordered: out row i is w row rows[i] (GGUF's q/k permutation undone).
QuantMatrix permute_rows(const QuantMatrix& w, const std::vector<int64_t>& rows);

struct QuantMatmulArgs {
  const float* x = nullptr;  // [m, k], row stride ldx
  int64_t m = 0;
  int64_t ldx = 0;
  const QuantMatrix* w = nullptr;
  const float* bias = nullptr;  // [n] or null, added last
  float* y = nullptr;           // [m, n], row stride ldy
  int64_t ldy = 0;
  QuantMode mode = QuantMode::kExact;
};

void quant_matmul(const QuantMatmulArgs& a, ThreadPool& pool);
// Several products of one x (the same x, m, ldx, k and mode; each part its own
// weights, bias and output), e.g. q/k/v or gate/up kept as separate tensors:
// one parallel job for all of them, and in int8 mode x quantized once per
// block size. Every output is bit for bit the one quant_matmul gives for its
// part alone. At most kMaxQuantParts parts.
constexpr int kMaxQuantParts = 8;
void quant_matmul_parts(const QuantMatmulArgs* parts, int count, ThreadPool& pool);
// Scalar reference with the same per-element order.
void quant_matmul_reference(const QuantMatmulArgs& a);
// Name of the SIMD target the quantized kernels dispatch to (e.g. "AVX3_ZEN4").
const char* quant_target_name();

}  // namespace hubzoo
