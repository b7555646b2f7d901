// Batch-invariant matmul: y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]).
//
// Contract (docs/design.md, batch invariance): every output element is
// reduced over K in one fixed order: K is cut into blocks of kKBlock; within a
// block one FMA chain runs over k in order from 0.0f; the block sums are added
// to a total (from 0.0f) in k order; bias is added last. The result of an
// element therefore does not depend on M, on which rows share a tile, on the
// thread count or on the ISA: it equals matmul_reference() bit for bit.
// Blocking K keeps rounding error near that of library GEMMs (which also sum
// per K block) instead of growing with one chain over all of K.
//
// W is packed once at load into column panels of kPanel columns:
// panel p, element (n, k) lives at data[(p * K + k) * kPanel + (n - p * kPanel)],
// with zero padding past N. Threads split rows and panels, never K.
//
// The tile chain (bf16_tiles below; Intel AMX-BF16's tdpbf16ps computes it,
// measured bit for bit): K is cut into blocks of kTileK, past K padded with
// zeros; within a block the even k's and the odd k's each run one FMA chain
// in k order from 0.0f, their sum is added to the total (from 0.0f) in
// block order, and bias is added last; x is rounded to bf16 and every operand
// and result flushed as for bf16_activations. Like the chain above, it does
// not depend on M, tiling, threads or ISA: it equals matmul_reference().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/matmul_coded.h"
#include "ops/quant.h"
#include "ops/thread_pool.h"

namespace hubzoo {

constexpr int64_t kPanel = 32;   // columns per packed panel (2 AVX-512 vectors)
constexpr int64_t kKBlock = 64;  // k per FMA chain; fixed, whatever the shape
constexpr int64_t kTileK = 32;   // k per block of the tile chain (one AMX tile's k)

// Weights packed as float32, or as bf16 or IEEE fp16 (bit patterns, converted
// exactly to float32 in registers): the same layout, the same reduction
// order, so a bf16 or fp16 matrix gives exactly the result of its float32
// widening in half the bytes.
//
// Or block-quantized (ops/quant.h): `quant` holds one or more QuantMatrix
// parts stacked by rows (a fused projection whose parts have different block
// types, e.g. q/k in Q4_K and v in Q6_K), each kept in GGML's row layout,
// often straight in the mapped file; matmul runs quant_matmul per part.
struct PackedMatrix {
  int64_t n = 0;  // output features (rows of W)
  int64_t k = 0;  // input features
  // Exactly one of these holds the weights: panels (64-byte aligned) of
  // float32 or of 16-bit values (bf16, or fp16 where `f16`), or quantized parts.
  std::unique_ptr<float[], void (*)(float*)> data{nullptr, nullptr};
  std::unique_ptr<uint16_t[], void (*)(uint16_t*)> half{nullptr, nullptr};
  bool f16 = false;  // `half` holds IEEE binary16 bit patterns (an F16 checkpoint)
  std::vector<std::shared_ptr<const QuantMatrix>> quant;
  QuantMode quant_mode = QuantMode::kExact;
  // bf16 weights that multiply bf16 activations (eager bf16, whose matmul
  // inputs transformers holds in bf16): x is rounded to bf16 (a no-op on such
  // inputs) and the chain of matmul.h runs with denormals flushed to zero (DAZ
  // and FTZ on every operation, bias included), on every target. That is what
  // the CPU's bf16 dot product (vdpbf16ps: two FMAs per lane, the higher
  // element first, on exact products) computes, so where the CPU has one the
  // kernel uses it with the pairs of k swapped: the same chain, twice the
  // products per instruction, half the activation bytes. Elsewhere the FMA
  // kernel runs under MXCSR FTZ/DAZ. Only values below 2^-126 in magnitude
  // can differ from the unflushed chain.
  bool bf16_activations = false;
  // bf16_activations weights laid out as tdpbf16ps's second operand and
  // multiplied in the tile chain (above): in panel p, K rounded up to kTileK
  // (tile_k()), the pair (k, k + 1) of column n at
  // half[p * tile_k() * kPanel + (k / 2) * 2 * kPanel + (n % kPanel) * 2 + k % 2],
  // zero past K and N. Made by to_bf16_tiles where matmul_bf16_tiles() says
  // so; on a CPU without AMX-BF16 the chain runs in scalar code (tests).
  bool bf16_tiles = false;
  // bf16_activations weights coded in 12 bits each (ops/matmul_coded.h)
  // instead of `half`: the same values, the same chain, a quarter fewer bytes
  // to stream. Made by to_bf16_coded where matmul_bf16_coded() says so.
  std::shared_ptr<const CodedBf16> coded;
  int64_t tile_k() const { return (k + kTileK - 1) / kTileK * kTileK; }
  // 16-bit or float elements from one panel to the next.
  int64_t panel_elements() const { return (bf16_tiles ? tile_k() : k) * kPanel; }
  bool is_half() const { return half != nullptr; }
  bool is_bf16() const { return (half != nullptr && !f16) || coded != nullptr; }
  bool is_coded() const { return coded != nullptr; }
  bool is_f16() const { return half != nullptr && f16; }
  bool is_quantized() const { return !quant.empty(); }
  int64_t num_panels() const { return (n + kPanel - 1) / kPanel; }
  int64_t bytes() const;
  // Element W[row, col] read back from the packed layout (embedding lookup of tied weights).
  float at(int64_t row, int64_t col) const;
  void copy_row(int64_t row, float* out) const;  // W[row, :] -> out[0..k)
};

// Packs row-major W [n, k] (float32).
PackedMatrix pack_weights(const float* w, int64_t n, int64_t k);
// Packs row-major W [n, k] as bf16, rounding to nearest even (as torch's .to(bfloat16)).
PackedMatrix pack_weights_bf16(const float* w, int64_t n, int64_t k);
// A quantized matrix made of `parts` stacked by rows (same k); the parts are shared, not copied.
PackedMatrix pack_quantized(std::vector<std::shared_ptr<const QuantMatrix>> parts,
                            QuantMode mode = QuantMode::kExact);

// What a packed matrix's panels hold.
enum class PanelType : uint8_t { kF32, kBF16, kF16 };

// Row-major [rows, k] float32 blocks stacked into one matrix, packed once
// (as float32, as bf16 rounded to nearest even, or as fp16): the packing of
// the concatenated rows, without building them. For fused projections (q/k/v, gate/up).
struct WeightRows {
  const float* w = nullptr;
  int64_t rows = 0;
  // Instead of w: rows stored as bf16 bit patterns (a bf16 checkpoint), widened
  // exactly while packing, without a float32 copy of the tensor.
  const uint16_t* bf16_bits = nullptr;
  // Or as fp16 bit patterns (an F16 checkpoint), the same way.
  const uint16_t* f16_bits = nullptr;
};
// `tiles`: bf16 in the tile layout (bf16_tiles, which implies bf16_activations).
// kF16 panels take only parts stored as fp16 (f16_bits): they are copied, never
// rounded (a float32 part would have to be).
PackedMatrix pack_weights_concat(const std::vector<WeightRows>& parts, int64_t k, PanelType type,
                                 bool tiles = false);
// A bf16_activations matrix laid out for the tile chain (bf16_tiles); the
// values are the same. Throws InvalidArgument on other matrices.
PackedMatrix to_bf16_tiles(PackedMatrix p);
// Packed matrices (same k and dtype) stacked by rows into one: the panels
// copied where every part but the last fills whole panels, else repacked;
// quantized matrices share their parts (same k and mode). Parts of different
// panel types without bf16_activations stack as float32 (exact widenings).
PackedMatrix concat_packed(const std::vector<const PackedMatrix*>& parts);

// x: [m, k] row-major with row stride ldx (>= k); y: [m, n] with row stride ldy (>= n).
// bias may be null.
struct MatmulArgs {
  const float* x = nullptr;
  int64_t m = 0;
  int64_t ldx = 0;
  const PackedMatrix* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
};

void matmul(const MatmulArgs& a, ThreadPool& pool);

// Scalar reference with the same per-element order (std::fma chain).
void matmul_reference(const MatmulArgs& a);

// Name of the SIMD target the dispatcher picked, e.g. "AVX3" (for reports).
const char* matmul_target_name();

// Whether matrices with bf16_activations run on the CPU's bf16 dot products
// (AVX512-BF16 and an AVX-512 target), and a switch for tests and benchmarks
// to run them on the FMA kernel instead (the same values, bit for bit).
bool matmul_bf16_dot();
void set_matmul_bf16_dot_allowed(bool allowed);

// Whether this process lays bf16_activations matrices out for the tile chain
// (the model loader asks at load): the CPU has AMX-BF16, Linux grants the
// tile state (ops/cpu_amx.h) and it is allowed (a switch for tests and
// benchmarks; it decides the layout of matrices loaded after it, and with it
// their bits). How many products the AMX kernel has run (tests).
bool matmul_bf16_tiles();
void set_matmul_bf16_tiles_allowed(bool allowed);
int64_t matmul_amx_products();

// Whether this process codes bf16 matrices (ops/matmul_coded.h; the model
// loader asks at load), those with bf16_activations or those without: with,
// where they run on the bf16 dot product kernel (matmul_bf16_dot()) and not on
// the tile chain; without (fp32 x, the FMA kernel), where the target is
// AVX-512; and where it is allowed (a switch for tests and benchmarks; the
// values and bits of every product are the same).
bool matmul_bf16_coded(bool bf16_activations = true);
void set_matmul_bf16_coded_allowed(bool allowed);

// Whether that target runs the register-tiled SIMD kernel. Targets without a
// native FMA (SSE2, SSSE3, SSE4, EMU128) and scalable vectors run the scalar
// std::fma chain instead: the reference's own arithmetic, tiled and threaded.
bool matmul_has_vector_kernel();

}  // namespace hubzoo
