// Per-target part of ops/matmul.cc, split off for size: MatmulTileAmx, the
// tile chain of bf16_tiles matrices (matmul.h) on Intel AMX-BF16. A fragment
// of matmul.cc's HWY_NAMESPACE, included there for AVX-512 targets only,
// after CeilDiv and kRowChunkBytes; not a header of its own.
//
// tdpbf16ps C, A, B adds to each fp32 C[m][n] the sum of two chains over the
// instruction's 16 pairs of k, one over the even k's products and one over
// the odd k's, each from 0 (exact products, DAZ/FTZ, nearest even): measured
// bit for bit against that order on spread-out and near-denormal values
// (Matmul.TileChainBitIdenticalToContract). A holds 16 rows of x, 32 bf16
// each in k order; B 16 pairs of k, each the (k, k + 1) of 16 columns: half
// a bf16_tiles panel, rows 128 bytes apart. A tile of totals stays in its
// register over all of K, so the chain needs no partial totals in y.
// Instructions are inline assembly (no target of Highway 1.0 enables them).

// Tiles: tmm0-3 the totals of 32 rows x one panel (tmm0/1: rows 0-15,
// columns 0-15 / 16-31; tmm2/3: rows 16-31), tmm4/5 the two row tiles of x,
// tmm6/7 the panel's two column halves over one kTileK block.
constexpr int64_t kAmxTileRows = 16;

// The first `valid` of 16 lanes (0 when valid <= 0).
HWY_INLINE __mmask16 FirstLanes(int64_t valid) {
  return valid >= 16 ? __mmask16{0xFFFF}
                     : static_cast<__mmask16>((1u << std::max<int64_t>(valid, 0)) - 1u);
}

// Rows [0, rows) of x (ldx apart) as bf16 in k order, rounded as
// vcvtne2ps2bf16 rounds (DAZ, then nearest even), zero from K to kp; rows
// [rows, padded) zero; rows ld elements apart.
void ToBf16Rows(const float* x, int64_t ldx, int64_t rows, int64_t padded, int64_t K, int64_t kp,
                uint16_t* out, int64_t ld) {
  for (int64_t r = 0; r < padded; ++r) {
    uint16_t* o = out + r * ld;
    if (r >= rows) {
      std::memset(o, 0, static_cast<size_t>(kp) * sizeof(uint16_t));
      continue;
    }
    const float* xr = x + r * ldx;
    for (int64_t k = 0; k < kp; k += kTileK) {
      const __m512 lo = _mm512_maskz_loadu_ps(FirstLanes(K - k), xr + k);
      const __m512 hi = _mm512_maskz_loadu_ps(FirstLanes(K - k - 16), xr + k + 16);
      __m512i bf;  // words 0-15 from lo, 16-31 from hi
      asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(bf) : "v"(hi), "v"(lo));
      _mm512_storeu_si512(o + k, bf);
    }
  }
}

// Totals of 16 (kTwo: 32) rows of x (xa, rows lda_bytes apart) x one panel
// (wp) over `blocks` kTileK blocks, left in tmm0-1 (and tmm2-3).
template <bool kTwo>
HWY_INLINE void AmxPanelRows(const uint16_t* xa, int64_t lda_bytes, const uint16_t* wp,
                             int64_t blocks) {
  asm volatile("tilezero %%tmm0\n\ttilezero %%tmm1" ::: "memory");
  if constexpr (kTwo) asm volatile("tilezero %%tmm2\n\ttilezero %%tmm3" ::: "memory");
  static_assert(2 * kPanel * sizeof(uint16_t) == 128, "amx_bf16_block: pairs 128 bytes apart");
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t* a = xa + b * kTileK;
    amx_bf16_block<kTwo>(a, a + kAmxTileRows * (lda_bytes / 2), lda_bytes,
                         wp + b * kTileK * kPanel);
  }
}

// Stores totals tile T (16 x 16 floats) to `to`, rows ld_bytes apart.
template <int T>
HWY_INLINE void StoreTotals(float* to, int64_t ld_bytes) {
  static_assert(T >= 0 && T < 4, "tmm0-3 hold totals");
  if constexpr (T == 0)
    asm volatile("tilestored %%tmm0, (%0,%1,1)" : : "r"(to), "r"(ld_bytes) : "memory");
  if constexpr (T == 1)
    asm volatile("tilestored %%tmm1, (%0,%1,1)" : : "r"(to), "r"(ld_bytes) : "memory");
  if constexpr (T == 2)
    asm volatile("tilestored %%tmm2, (%0,%1,1)" : : "r"(to), "r"(ld_bytes) : "memory");
  if constexpr (T == 3)
    asm volatile("tilestored %%tmm3, (%0,%1,1)" : : "r"(to), "r"(ld_bytes) : "memory");
}

// Totals tile T to y's rows [0, rows) and columns [0, cols) of its 16 x 16
// (y at the tile's first element), plus bias (at the tile's first column)
// under the caller's FTZ/DAZ: flush(total + flush(bias)).
template <int T>
HWY_INLINE void TotalsToY(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias) {
  if (rows <= 0 || cols <= 0) return;
  const bool whole = rows >= kAmxTileRows && cols >= 16;
  alignas(64) float tmp[kAmxTileRows * 16];
  if (whole) {
    StoreTotals<T>(y, ldy * static_cast<int64_t>(sizeof(float)));
  } else {
    StoreTotals<T>(tmp, 16 * sizeof(float));
  }
  const __mmask16 mask = FirstLanes(cols);
  const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias) : _mm512_setzero_ps();
  for (int64_t r = 0; r < std::min(rows, kAmxTileRows); ++r) {
    float* out = y + r * ldy;
    if (whole && !bias) continue;
    __m512 v = whole ? _mm512_loadu_ps(out) : _mm512_load_ps(tmp + r * 16);
    if (bias) v = _mm512_add_ps(v, b);
    _mm512_mask_storeu_ps(out, mask, v);
  }
}

// The row stride of x's bf16 copy for a kp-wide tile layout: an odd number
// of cache lines, so a tile's 16 rows fall in 16 L1 sets.
HWY_INLINE int64_t AmxRowStride(int64_t kp) { return (std::max<int64_t>(kp / 32, 1) | 1) * 32; }

// Rows of x's bf16 copy converted at a time: a chunk that stays in L2 while
// every panel passes over it.
HWY_INLINE int64_t AmxRowChunk(int64_t ld) {
  const int64_t lda_bytes = ld * static_cast<int64_t>(sizeof(uint16_t));
  return std::max<int64_t>(1, kRowChunkBytes / lda_bytes / (2 * kAmxTileRows)) * 2 * kAmxTileRows;
}

// Panels [p0, p1) of rows [rc, rc + rows) of y from their bf16 copy xb (ld
// apart, zero rows up to a multiple of 16 past `rows`), tiles configured.
void AmxPanels(const MatmulArgs& a, const uint16_t* xb, int64_t ld, int64_t rc, int64_t rows,
               int64_t p0, int64_t p1) {
  const PackedMatrix& w = *a.w;
  const int64_t blocks = w.tile_k() / kTileK;
  const int64_t lda_bytes = ld * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t padded = CeilDiv(rows, kAmxTileRows) * kAmxTileRows;
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* wp = w.half.get() + p * w.panel_elements();
    const int64_t col = p * kPanel, cols = std::min(kPanel, w.n - col);
    const float* bias = a.bias ? a.bias + col : nullptr;
    for (int64_t rt = 0; rt < padded; rt += 2 * kAmxTileRows) {
      float* y = a.y + (rc + rt) * a.ldy + col;
      const int64_t left = rows - rt;  // rows of y from the tile's first on
      if (rt + kAmxTileRows < padded) {
        AmxPanelRows<true>(xb + rt * ld, lda_bytes, wp, blocks);
        TotalsToY<0>(y, a.ldy, left, cols, bias);
        TotalsToY<1>(y + 16, a.ldy, left, cols - 16, bias ? bias + 16 : nullptr);
        float* y2 = y + kAmxTileRows * a.ldy;
        TotalsToY<2>(y2, a.ldy, left - kAmxTileRows, cols, bias);
        TotalsToY<3>(y2 + 16, a.ldy, left - kAmxTileRows, cols - 16, bias ? bias + 16 : nullptr);
      } else {
        AmxPanelRows<false>(xb + rt * ld, lda_bytes, wp, blocks);
        TotalsToY<0>(y, a.ldy, left, cols, bias);
        TotalsToY<1>(y + 16, a.ldy, left, cols - 16, bias ? bias + 16 : nullptr);
      }
    }
  }
}

// MatmulTile for a bf16_tiles matrix: rows [r0, r1) x panels [p0, p1) on
// AMX tiles. x is converted to bf16 a chunk of rows at a time (each thread
// its own rows, as MatmulTileDot).
void MatmulTileAmx(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t K = a.w->k, kp = a.w->tile_k(), ld = AmxRowStride(kp), chunk = AmxRowChunk(ld);
  // 64-byte aligned, so that each tile row is one cache line (a loop of
  // these tile loads and products over operands straddling two lines ran at
  // half the rate of the aligned one, 0.7 against 1.5 TFLOP/s on one thread).
  thread_local AlignedScratch<uint16_t> xb;
  g_amx_products.fetch_add(1, std::memory_order_relaxed);
  AmxTileConfig::load_16x64();
  for (int64_t rc = r0; rc < r1; rc += chunk) {
    const int64_t rows = std::min(chunk, r1 - rc);
    const int64_t padded = CeilDiv(rows, kAmxTileRows) * kAmxTileRows;
    uint16_t* const x = xb.get(static_cast<size_t>(padded * ld));
    ToBf16Rows(a.x + rc * a.ldx, a.ldx, rows, padded, K, kp, x, ld);
    AmxPanels(a, x, ld, rc, rows, p0, p1);
  }
  asm volatile("tilerelease" ::: "memory");
}

// Matmul's split by columns alone (every thread all rows): x converted once,
// its rows split over the threads, then each thread's panels over all of it
// from the shared copy, a chunk of rows at a time, where each thread
// converted every row for itself before.
void MatmulAmxColumns(const MatmulArgs& a, int64_t col_groups, ThreadPool& pool) {
  const int64_t K = a.w->k, kp = a.w->tile_k(), ld = AmxRowStride(kp), chunk = AmxRowChunk(ld);
  const int64_t padded = CeilDiv(a.m, kAmxTileRows) * kAmxTileRows;
  thread_local AlignedScratch<uint16_t> xb;
  uint16_t* const x = xb.get(static_cast<size_t>(padded * ld));
  pool.parallel_for(padded / kAmxTileRows, 1, [&](int64_t begin, int64_t end) HWY_ATTR {
    const int64_t r0 = begin * kAmxTileRows, r1 = end * kAmxTileRows;
    const int64_t rows = std::clamp<int64_t>(a.m - r0, 0, r1 - r0);
    ToBf16Rows(a.x + r0 * a.ldx, a.ldx, rows, r1 - r0, K, kp, x + r0 * ld, ld);
  });
  const int64_t panels = a.w->num_panels();
  pool.parallel_for(col_groups, 1, [&](int64_t begin, int64_t end) HWY_ATTR {
    FlushDenormals guard(true);
    g_amx_products.fetch_add(1, std::memory_order_relaxed);
    AmxTileConfig::load_16x64();
    for (int64_t cg = begin; cg < end; ++cg) {
      const int64_t p0 = cg * panels / col_groups, p1 = (cg + 1) * panels / col_groups;
      for (int64_t rc = 0; rc < a.m && p0 < p1; rc += chunk) {
        AmxPanels(a, x + rc * ld, ld, rc, std::min(chunk, a.m - rc), p0, p1);
      }
    }
    asm volatile("tilerelease" ::: "memory");
  });
}
