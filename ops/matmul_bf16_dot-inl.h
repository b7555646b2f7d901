// Per-target part of ops/matmul.cc, split off for size: the kernel of
// bf16_activations matrices on the CPU's bf16 dot products (vdpbf16ps),
// MatmulTileDot. A fragment of matmul.cc's HWY_NAMESPACE, included there for
// AVX-512 targets only, after Tile, ForEachPanelTile and ForEachRowBlock (whose
// blocking it shares); not a header of its own.

// bf16 dot products for bf16_activations (matmul.h). vdpbf16ps adds to each
// fp32 lane the product of the high bf16 halves of its two 32-bit operands,
// then that of the low halves: exact products, DAZ/FTZ, round to nearest even
// (measured against two std::fma on this code's CPUs; ops/matmul_test.cc). A
// lane whose high halves hold w[k], x[k] and low halves w[k+1], x[k+1] is thus
// two steps of the chain in k order. Inline assembly: Highway 1.0 has no
// bf16 dot product and the AVX3 target does not enable the instruction set.
// x pairs come from memory, broadcast to every lane ({1to16}), which keeps the
// register file for accumulators as the FMA kernel's folded broadcast does.
HWY_INLINE __m512 DotBf16(__m512 acc, __m512i w, const uint32_t* x_pair) {
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x_pair));
  return acc;
}

// A panel's k and k + 1 rows (32 columns each) as the two vectors of lane
// pairs: vpunpck{l,h}wd interleave within 128-bit lanes, so `lo` holds
// columns 8L + 0..3 and `hi` columns 8L + 4..7 of 128-bit lane L. Totals stay
// in that order and are permuted to columns only when they meet y.
alignas(64) constexpr int32_t kToLo[16] = {0,  1,  2,  3,  8,  9,  10, 11,
                                           16, 17, 18, 19, 24, 25, 26, 27};
alignas(64) constexpr int32_t kToHi[16] = {4,  5,  6,  7,  12, 13, 14, 15,
                                           20, 21, 22, 23, 28, 29, 30, 31};
alignas(64) constexpr int32_t kToCols0[16] = {0, 1, 2, 3, 16, 17, 18, 19,
                                              4, 5, 6, 7, 20, 21, 22, 23};
alignas(64) constexpr int32_t kToCols1[16] = {8,  9,  10, 11, 24, 25, 26, 27,
                                              12, 13, 14, 15, 28, 29, 30, 31};
HWY_INLINE __m512i Index(const int32_t (&i)[16]) { return _mm512_load_si512(i); }

// A k block's sums added to the tile's totals.
template <int MR, int NP>
HWY_INLINE void AddBlockSums(__m512 (&total)[MR][NP][2], const __m512 (&acc)[MR][NP][2]) {
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      total[r][p][0] = _mm512_add_ps(total[r][p][0], acc[r][p][0]);
      total[r][p][1] = _mm512_add_ps(total[r][p][1], acc[r][p][1]);
    }
  }
}

// A tile's totals (in the lanes' (lo, hi) order) permuted back to columns and
// stored into y, plus bias where given (the last k range).
template <int MR, int NP>
HWY_INLINE void StoreTotalsDot(const __m512 (&total)[MR][NP][2], const float* HWY_RESTRICT bias,
                               float* HWY_RESTRICT y, int64_t ldy, int64_t n_valid) {
  const DF d;
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
    float* out_row = y + r * ldy;
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      const __m512 cols[2] = {
          _mm512_permutex2var_ps(total[r][p][0], Index(kToCols0), total[r][p][1]),
          _mm512_permutex2var_ps(total[r][p][0], Index(kToCols1), total[r][p][1])};
#pragma GCC unroll 2
      for (int v = 0; v < 2; ++v) {
        const int64_t col = p * kPanel + v * 16;
        const float* b = bias;
        if (col + 16 <= n_valid) {
          V t{cols[v]};
          if (b) t = hn::Add(t, hn::LoadU(d, b + col));
          hn::StoreU(t, d, out_row + col);
        } else if (col < n_valid) {  // last, partial panel
          alignas(64) float tmp[16];
          _mm512_store_ps(tmp, cols[v]);
          for (int64_t i = 0; i < n_valid - col; ++i) {
            out_row[col + i] = b ? tmp[i] + b[col + i] : tmp[i];
          }
        }
      }
    }
  }
}

// Tile's arithmetic (same totals, same k blocks, same stores) on x as bf16
// pairs: xp row 0 at the tile's first pair, rows ldxp pairs apart. kPairs:
// w holds the pairs already in the order they are multiplied (the lo and hi
// vectors of each pair of k's, 64 words at kk * kPanel), as a coded
// matrix's blocks are decoded (ops/matmul_bf16_coded-inl.h).
template <int MR, int NP, bool kPairs = false>
HWY_INLINE void TileDot(const uint32_t* HWY_RESTRICT xp, int64_t ldxp,
                        const uint16_t* HWY_RESTRICT w, int64_t k_len, int64_t panel_stride,
                        bool first, bool last, const float* HWY_RESTRICT bias,
                        float* HWY_RESTRICT y, int64_t ldy, int64_t n_valid) {
  const DF d;
  __m512 total[MR][NP][2];
  __m512 acc[MR][NP][2];
  // y's columns -> (lo, hi) order, or back; partial panels through a buffer.
  const auto load_cols = [&](const float* row, int64_t col) {
    if (first || col >= n_valid) return _mm512_setzero_ps();
    if (col + 16 <= n_valid) return _mm512_loadu_ps(row + col);
    alignas(64) float tmp[16] = {};
    for (int64_t i = 0; i < n_valid - col; ++i) tmp[i] = row[col + i];
    return _mm512_load_ps(tmp);
  };
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      const __m512 c0 = load_cols(y + r * ldy, p * kPanel),
                   c1 = load_cols(y + r * ldy, p * kPanel + 16);
      total[r][p][0] = _mm512_permutex2var_ps(c0, Index(kToLo), c1);
      total[r][p][1] = _mm512_permutex2var_ps(c0, Index(kToHi), c1);
    }
  }
  for (int64_t k0 = 0; k0 < k_len; k0 += kKBlock) {
    const int64_t k1 = std::min(k_len, k0 + kKBlock);
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) acc[r][p][0] = acc[r][p][1] = _mm512_setzero_ps();
    }
    // k1 - k0 is odd only at the end of an odd K: the last pair's k + 1 is zero.
    for (int64_t kk = k0; kk < k1; kk += 2) {
      __m512i lo[NP], hi[NP];
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) {
        const uint16_t* wk = w + p * panel_stride + kk * kPanel;
        if constexpr (kPairs) {
          lo[p] = _mm512_load_si512(wk);
          hi[p] = _mm512_load_si512(wk + kPanel);
          continue;
        }
        const __m512i a = _mm512_load_si512(wk);
        const __m512i b = kk + 1 < k1 ? _mm512_load_si512(wk + kPanel) : _mm512_setzero_si512();
        lo[p] = _mm512_unpacklo_epi16(b, a);
        hi[p] = _mm512_unpackhi_epi16(b, a);
      }
#pragma GCC unroll 64
      for (int r = 0; r < MR; ++r) {
        const uint32_t* x = xp + r * ldxp + kk / 2;
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
          acc[r][p][0] = DotBf16(acc[r][p][0], lo[p], x);
          acc[r][p][1] = DotBf16(acc[r][p][1], hi[p], x);
        }
      }
    }
    AddBlockSums<MR, NP>(total, acc);
  }
  StoreTotalsDot<MR, NP>(total, last ? bias : nullptr, y, ldy, n_valid);
}

// RowBlock on x as bf16 pairs (xp row 0 at k = 0).
template <int MR>
HWY_NOINLINE void RowBlockDot(const uint32_t* xp, int64_t ldxp, const PackedMatrix& w, int64_t p0,
                              int64_t p1, int64_t k0, int64_t k1, const float* bias, float* y,
                              int64_t ldy) {
  const int64_t K = w.k;
  ForEachPanelTile<PanelsPerTile(MR)>(p0, p1, [&](int64_t p, auto np) {
    TileDot<MR, decltype(np)::value>(xp + k0 / 2, ldxp, w.half.get() + p * K * kPanel + k0 * kPanel,
                                     k1 - k0, K * kPanel, k0 == 0, k1 == K,
                                     bias ? bias + p * kPanel : nullptr, y + p * kPanel, ldy,
                                     w.n - p * kPanel);
  });
}

using RowBlockDotFn = void (*)(const uint32_t*, int64_t, const PackedMatrix&, int64_t, int64_t,
                               int64_t, int64_t, const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockDotFn, sizeof...(I)> MakeRowBlockDotTable(std::index_sequence<I...>) {
  return {&RowBlockDot<static_cast<int>(I) + 1>...};
}
constexpr auto kRowBlocksDot = MakeRowBlockDotTable(std::make_index_sequence<kMR>());

// Rows [b, e) of x as bf16 pairs, (x[2q] << 16) | x[2q + 1] (the high half is
// the first step of vdpbf16ps), rounded as vcvtne2ps2bf16 rounds (DAZ, then
// nearest even: flush_denormal then bf16_bits), rows ldp pairs apart.
void ToBf16Pairs(const float* x, int64_t ldx, int64_t rows, int64_t K, uint32_t* out, int64_t ldp) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    uint32_t* o = out + r * ldp;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m512 lo = _mm512_loadu_ps(xr + k), hi = _mm512_loadu_ps(xr + k + 16);
      __m512i bf;  // words 0-15 from lo, 16-31 from hi: element j's word is word j
      asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(bf) : "v"(hi), "v"(lo));
      // Halves swapped (Highway's rotate: GCC 12's _mm512_rol_epi32 warns of an
      // uninitialised source for its mask form).
      const hn::RebindToUnsigned<DF> du;
      hn::StoreU(hn::RotateRight<16>(hn::Vec<decltype(du)>{bf}), du, o + k / 2);
    }
    for (; k < K; k += 2) {
      const uint32_t a = bf16_bits(flush_denormal(xr[k]));
      const uint32_t b = k + 1 < K ? bf16_bits(flush_denormal(xr[k + 1])) : 0u;
      o[k / 2] = (a << 16) | b;
    }
  }
}

bool UseBf16Dot() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has && g_bf16_dot_allowed.load(std::memory_order_relaxed);
}

// Pairs per row of x, padded to an odd number of cache lines (see RowsShareL1Sets).
int64_t PairsStride(int64_t K) { return (CeilDiv(CeilDiv(K, 2), 16) | 1) * 16; }

// Rows [b, e) of x as bf16 pairs, ldp apart, in a per-thread buffer.
const uint32_t* XPairs(const MatmulArgs& a, int64_t b, int64_t e, int64_t ldp) {
  thread_local std::vector<uint32_t> pairs;
  pairs.resize((e - b) * ldp);
  ToBf16Pairs(a.x + b * a.ldx, a.ldx, e - b, a.w->k, pairs.data(), ldp);
  return pairs.data();
}

// MatmulTile on bf16 dot products: x converted to bf16 pairs per row chunk
// (per thread: threads split columns, so each converts its rows), the same
// blocking as the FMA kernel.
void MatmulTileDot(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t ldp = PairsStride(a.w->k);
  const auto x_pairs = [&](int64_t b, int64_t e) { return XPairs(a, r0 + b, r0 + e, ldp); };
  ForEachRowBlock(a, r0, r1, p0, p1, 2, ldp, x_pairs,
                  [&](int64_t mr, const uint32_t* x, int64_t pg, int64_t pe, int64_t k0, int64_t k1,
                      int64_t r) {
                    kRowBlocksDot[mr - 1](x, ldp, *a.w, pg, pe, k0, k1, a.bias,
                                          a.y + (r0 + r) * a.ldy, a.ldy);
                  });
}
