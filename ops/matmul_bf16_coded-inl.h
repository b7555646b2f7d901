// Per-target part of ops/matmul.cc, split off for size: coded bf16 matrices
// (ops/matmul_coded.h) on the CPU's bf16 dot products. A fragment of
// matmul.cc's HWY_NAMESPACE, included there for AVX-512 targets only, after
// ops/matmul_bf16_dot-inl.h (whose TileDot, DotBf16 and XPairs it
// uses); not a header of its own.
//
// A pair of k's of a panel is rebuilt in registers: the 64 high bytes are
// vpshufb of the block's 16-byte table (broadcast to every 128-bit lane) by
// the 64 codes, and vpunpck{l,h}bw of the low bytes with them are the lo and
// hi word vectors TileDot multiplies. Escaped weights (code kEscapeCode) are
// written over the table's byte from the escape list, in byte order. Blocks
// without escapes (all but a few in a thousand) never look for them.

// Pair q of a block's lo and hi vectors; `codes`: its 64 codes (0..15 per byte).
template <bool kEscapes>
HWY_INLINE void CodedPair(const uint8_t* HWY_RESTRICT block, int64_t q, __m512i table,
                          __m512i codes, const uint8_t*& esc, __m512i& lo, __m512i& hi) {
  const __m512i low = _mm512_load_si512(block + coded_low_at(q));
  __m512i high = _mm512_shuffle_epi8(table, codes);
  if constexpr (kEscapes) {
    const __mmask64 m = _mm512_cmpeq_epi8_mask(codes, _mm512_set1_epi8(kEscapeCode));
    if (m != 0) {  // rare: through memory, in byte order
      alignas(64) uint8_t bytes[64];
      _mm512_store_si512(bytes, high);
      for (uint64_t bits = m; bits != 0; bits &= bits - 1) bytes[__builtin_ctzll(bits)] = *esc++;
      high = _mm512_load_si512(bytes);
    }
  }
  lo = _mm512_unpacklo_epi8(low, high);
  hi = _mm512_unpackhi_epi8(low, high);
}

// The 64 codes of pair q of a block (q's nibbles of its code bytes).
HWY_INLINE __m512i CodedCodes(const uint8_t* HWY_RESTRICT block, int64_t q) {
  const __m512i n = _mm512_load_si512(block + coded_codes_at(q));
  return _mm512_and_si512(q % 2 ? _mm512_srli_epi16(n, 4) : n, _mm512_set1_epi8(0x0F));
}

// A block's table in every 128-bit lane (Highway's vbroadcasti32x4: GCC 12's
// intrinsic warns of an undefined source).
HWY_INLINE __m512i CodedTable(const uint8_t* table) {
  return hn::LoadDup128(hn::ScalableTag<uint8_t>(), table).raw;
}

// Block b of NP panels from p0 as a tile rebuilds it: each panel's block,
// its next escape, its table.
template <int NP>
struct CodedBlocks {
  const uint8_t* block[NP];
  const uint8_t* esc[NP];
  __m512i table[NP];
  HWY_INLINE CodedBlocks(const CodedBf16& c, int64_t p0, int64_t b) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      block[p] = c.block(p0 + p, b);
      esc[p] = c.escapes.data() + c.escape_info(p0 + p, b)[0];
      table[p] = CodedTable(c.table(p0 + p, b));
    }
  }
  // Pair q of panel p's block (pairs in order: escapes are consumed so).
  template <bool kEscapes>
  HWY_INLINE void Pair(int p, int64_t q, __m512i& lo, __m512i& hi) {
    CodedPair<kEscapes>(block[p], q, table[p], CodedCodes(block[p], q), esc[p], lo, hi);
  }
};

// One k block of NP panels (p0 first) into acc, MR rows of x pairs at xp
// (the block's first pair).
template <int MR, int NP, bool kEscapes>
HWY_INLINE void CodedBlockDot(const CodedBf16& c, int64_t p0, int64_t b, int64_t pairs,
                              const uint32_t* HWY_RESTRICT xp, int64_t ldxp,
                              __m512 (&acc)[MR][NP][2]) {
  CodedBlocks<NP> in(c, p0, b);
  for (int64_t q = 0; q < pairs; ++q) {
    __m512i lo[NP], hi[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) in.template Pair<kEscapes>(p, q, lo[p], hi[p]);
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
      const uint32_t* x = xp + r * ldxp + q;
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) {
        acc[r][p][0] = DotBf16(acc[r][p][0], lo[p], x);
        acc[r][p][1] = DotBf16(acc[r][p][1], hi[p], x);
      }
    }
  }
}

// Over all of K (first and last) of NP coded panels from p0: each k block's
// sums, block(escapes, b, k0, len, acc) with `escapes` a std::bool_constant
// (whether any of the panels' block has escapes), added to the totals in k
// order, then stored (permuted back to columns) into y with bias.
template <int MR, int NP, typename Block>
HWY_INLINE void TileCodedBlocks(const PackedMatrix& w, int64_t p0, const float* HWY_RESTRICT bias,
                                float* HWY_RESTRICT y, int64_t ldy, const Block& block) {
  const CodedBf16& c = *w.coded;
  __m512 total[MR][NP][2];
  __m512 acc[MR][NP][2];
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) total[r][p][0] = total[r][p][1] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < c.kblocks; ++b) {
    const int64_t k0 = b * kKBlock, len = std::min(kKBlock, w.k - k0);
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) acc[r][p][0] = acc[r][p][1] = _mm512_setzero_ps();
    }
    bool escapes = false;
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) escapes = escapes || c.escape_info(p0 + p, b)[1] != 0;
    if (escapes) {
      block(std::true_type(), b, k0, len, acc);
    } else {
      block(std::false_type(), b, k0, len, acc);
    }
    AddBlockSums<MR, NP>(total, acc);
  }
  StoreTotalsDot<MR, NP>(total, bias ? bias + p0 * kPanel : nullptr, y + p0 * kPanel, ldy,
                         w.n - p0 * kPanel);
}

// TileDot over all of K (first and last) of NP coded panels from p0.
template <int MR, int NP>
HWY_INLINE void TileCoded(const uint32_t* HWY_RESTRICT xp, int64_t ldxp, const PackedMatrix& w,
                          int64_t p0, const float* HWY_RESTRICT bias, float* HWY_RESTRICT y,
                          int64_t ldy) {
  TileCodedBlocks<MR, NP>(
      w, p0, bias, y, ldy,
      [&](auto escapes, int64_t b, int64_t k0, int64_t len, __m512(&acc)[MR][NP][2]) HWY_ATTR {
        CodedBlockDot<MR, NP, decltype(escapes)::value>(*w.coded, p0, b, (len + 1) / 2, xp + k0 / 2,
                                                        ldxp, acc);
      });
}

// Rows per row block of the coded kernel: a panel's table and the pair being
// rebuilt take registers beside the accumulators, so fewer rows and panels
// than TileDot's (kMR = 14 rows would spill).
constexpr int kMRCoded = 12;
constexpr int PanelsPerTileCoded(int mr) { return std::clamp(26 / (2 * mr + 1), 1, 4); }

// Rows of one row block (x as bf16 pairs) over panels [p0, p1), all of K.
template <int MR>
HWY_NOINLINE void RowBlockCoded(const uint32_t* xp, int64_t ldxp, const PackedMatrix& w, int64_t p0,
                                int64_t p1, const float* bias, float* y, int64_t ldy) {
  ForEachPanelTile<PanelsPerTileCoded(MR)>(p0, p1, [&](int64_t p, auto np) HWY_ATTR {
    TileCoded<MR, decltype(np)::value>(xp, ldxp, w, p, bias, y, ldy);
  });
}
using RowBlockCodedFn = void (*)(const uint32_t*, int64_t, const PackedMatrix&, int64_t, int64_t,
                                 const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockCodedFn, sizeof...(I)> MakeRowBlockCodedTable(
    std::index_sequence<I...>) {
  return {&RowBlockCoded<static_cast<int>(I) + 1>...};
}
constexpr auto kRowBlocksCoded = MakeRowBlockCodedTable(std::make_index_sequence<kMRCoded>());

// Panels [pg, pe) over k blocks [k0, k1) decoded into `pairs` as TileDot's
// kPairs layout, panels `stride` words apart.
void DecodeCodedPairs(const PackedMatrix& w, int64_t pg, int64_t pe, int64_t k0, int64_t k1,
                      int64_t stride, uint16_t* HWY_RESTRICT pairs) {
  const CodedBf16& c = *w.coded;
  for (int64_t p = pg; p < pe; ++p) {
    uint16_t* out = pairs + (p - pg) * stride;
    for (int64_t b = k0 / kKBlock; b * kKBlock < k1; ++b) {
      const uint8_t* block = c.block(p, b);
      const uint8_t* esc = c.escapes.data() + c.escape_info(p, b)[0];
      const __m512i table = CodedTable(c.table(p, b));
      const int64_t n = (std::min(kKBlock, w.k - b * kKBlock) + 1) / 2;
      const bool escapes = c.escape_info(p, b)[1] != 0;
      for (int64_t q = 0; q < n; ++q) {
        __m512i lo, hi;
        if (escapes) {
          CodedPair<true>(block, q, table, CodedCodes(block, q), esc, lo, hi);
        } else {
          CodedPair<false>(block, q, table, CodedCodes(block, q), esc, lo, hi);
        }
        uint16_t* o = out + (b * kKBlock - k0 + 2 * q) * kPanel;
        _mm512_store_si512(o, lo);
        _mm512_store_si512(o + kPanel, hi);
      }
    }
  }
}

template <int MR>
HWY_NOINLINE void RowBlockPairs(const uint32_t* xp, int64_t ldxp, const uint16_t* pairs,
                                int64_t panel_stride, const PackedMatrix& w, int64_t pg, int64_t pe,
                                int64_t k0, int64_t k1, const float* bias, float* y, int64_t ldy) {
  ForEachPanelTile<PanelsPerTile(MR)>(pg, pe, [&](int64_t p, auto np) HWY_ATTR {
    TileDot<MR, decltype(np)::value, true>(
        xp + k0 / 2, ldxp, pairs + (p - pg) * panel_stride, k1 - k0, panel_stride, k0 == 0,
        k1 == w.k, bias ? bias + p * kPanel : nullptr, y + p * kPanel, ldy, w.n - p * kPanel);
  });
}
using RowBlockPairsFn = void (*)(const uint32_t*, int64_t, const uint16_t*, int64_t,
                                 const PackedMatrix&, int64_t, int64_t, int64_t, int64_t,
                                 const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockPairsFn, sizeof...(I)> MakeRowBlockPairsTable(
    std::index_sequence<I...>) {
  return {&RowBlockPairs<static_cast<int>(I) + 1>...};
}
constexpr auto kRowBlocksPairs = MakeRowBlockPairsTable(std::make_index_sequence<kMR>());

// MatmulTileDot for a coded matrix: a few rows (decode steps) multiply the
// blocks as they rebuild them, each row block rebuilding them again from
// cache; more rows decode each panel group's k range once per row chunk into
// a per-thread buffer (as the FMA kernel widens bf16 on AVX2) that every row
// block of the chunk then reads.
constexpr int64_t kDirectRows = 4 * kMRCoded;
void MatmulTileCoded(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t ldp = PairsStride(a.w->k);
  const auto x_pairs = [&](int64_t b, int64_t e) { return XPairs(a, r0 + b, r0 + e, ldp); };
  const int64_t rows = r1 - r0;
  if (rows <= kDirectRows) {  // row blocks of equal size, each over all of K
    const int64_t blocks = CeilDiv(rows, kMRCoded), per = CeilDiv(rows, blocks);
    const uint32_t* x = x_pairs(0, rows);
    for (int64_t r = 0; r < rows; r += per) {
      kRowBlocksCoded[std::min(per, rows - r) - 1](x + r * ldp, ldp, *a.w, p0, p1, a.bias,
                                                   a.y + (r0 + r) * a.ldy, a.ldy);
    }
    return;
  }
  thread_local hwy::AlignedFreeUniquePtr<uint16_t[]> pairs;
  thread_local int64_t capacity = 0;
  int64_t at_pg = -1, at_k0 = -1;
  ForEachRowBlock(a, r0, r1, p0, p1, 2, ldp, x_pairs,
                  [&](int64_t mr, const uint32_t* x, int64_t pg, int64_t pe, int64_t k0, int64_t k1,
                      int64_t r) {
                    const int64_t stride = CeilDiv(k1 - k0, 2) * 2 * kPanel;
                    if (pg != at_pg || k0 != at_k0) {
                      if ((pe - pg) * stride > capacity) {
                        pairs =
                            hwy::AllocateAligned<uint16_t>(static_cast<size_t>((pe - pg) * stride));
                        if (!pairs) throw std::bad_alloc();
                        capacity = (pe - pg) * stride;
                      }
                      DecodeCodedPairs(*a.w, pg, pe, k0, k1, stride, pairs.get());
                      at_pg = pg;
                      at_k0 = k0;
                    }
                    kRowBlocksPairs[mr - 1](x, ldp, pairs.get(), stride, *a.w, pg, pe, k0, k1,
                                            a.bias, a.y + (r0 + r) * a.ldy, a.ldy);
                  });
}

// ---- The same blocks on the FMA kernel: the fused mode's bf16 matrices
// (fp32 x, no bf16 dot products).

// Each dword's low word moved to its high one (the zero-masked form: GCC 12
// warns that the plain one's undefined source may be read).
HWY_INLINE __m512i ShiftUp16(__m512i v) { return _mm512_maskz_slli_epi32(0xFFFF, v, 16); }

// A pair's dword holds w[k] in its high word
// and w[k + 1] in its low one (DotBf16's order), so the high words masked are
// w[k] as floats and the low ones shifted up w[k + 1], both exactly; each
// lane's chain adds x[k] * w[k] before x[k + 1] * w[k + 1], k by k, and the
// block sums into the totals as Tile's do: the bits of Tile on the plain
// panels. The lanes hold the columns in the pair order (StoreTotalsDot
// permutes them back). kOdd: the pair has its k + 1 (not the last of an odd K).
// xt: the MR rows of x k-major (xt[k * MR + r]), so that every broadcast of
// a k is at a fixed offset from one pointer.
template <int MR, int NP, bool kEscapes, bool kOdd>
HWY_INLINE void CodedPairFma(CodedBlocks<NP>& in, int64_t q, const float* HWY_RESTRICT xt,
                             __m512 (&acc)[MR][NP][2]) {
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m512 even[NP][2], odd[NP][2];
#pragma GCC unroll 4
  for (int p = 0; p < NP; ++p) {
    __m512i lo, hi;
    in.template Pair<kEscapes>(p, q, lo, hi);
    even[p][0] = _mm512_castsi512_ps(_mm512_and_si512(lo, high));
    even[p][1] = _mm512_castsi512_ps(_mm512_and_si512(hi, high));
    if constexpr (kOdd) {
      odd[p][0] = _mm512_castsi512_ps(ShiftUp16(lo));
      odd[p][1] = _mm512_castsi512_ps(ShiftUp16(hi));
    }
  }
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
    const __m512 xk = _mm512_set1_ps(xt[2 * q * MR + r]);
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      acc[r][p][0] = _mm512_fmadd_ps(xk, even[p][0], acc[r][p][0]);
      acc[r][p][1] = _mm512_fmadd_ps(xk, even[p][1], acc[r][p][1]);
    }
    if constexpr (kOdd) {
      const __m512 xk1 = _mm512_set1_ps(xt[(2 * q + 1) * MR + r]);
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) {
        acc[r][p][0] = _mm512_fmadd_ps(xk1, odd[p][0], acc[r][p][0]);
        acc[r][p][1] = _mm512_fmadd_ps(xk1, odd[p][1], acc[r][p][1]);
      }
    }
  }
}

// One k block (len k's, xt at its first) of NP panels from p0 into acc.
template <int MR, int NP, bool kEscapes>
HWY_INLINE void CodedBlockFma(const CodedBf16& c, int64_t p0, int64_t b, int64_t len,
                              const float* HWY_RESTRICT xt, __m512 (&acc)[MR][NP][2]) {
  CodedBlocks<NP> in(c, p0, b);
  for (int64_t q = 0; q < len / 2; ++q) CodedPairFma<MR, NP, kEscapes, true>(in, q, xt, acc);
  if (len % 2) CodedPairFma<MR, NP, kEscapes, false>(in, len / 2, xt, acc);
}

// Tile over all of K (first and last) of NP coded panels from p0, fp32 x (k-major).
template <int MR, int NP>
HWY_INLINE void TileCodedFma(const float* HWY_RESTRICT xt, const PackedMatrix& w, int64_t p0,
                             const float* HWY_RESTRICT bias, float* HWY_RESTRICT y, int64_t ldy) {
  TileCodedBlocks<MR, NP>(
      w, p0, bias, y, ldy,
      [&](auto escapes, int64_t b, int64_t k0, int64_t len, __m512(&acc)[MR][NP][2]) HWY_ATTR {
        CodedBlockFma<MR, NP, decltype(escapes)::value>(*w.coded, p0, b, len, xt + k0 * MR, acc);
      });
}

template <int MR>
HWY_NOINLINE void RowBlockCodedFma(const float* xt, const PackedMatrix& w, int64_t p0, int64_t p1,
                                   const float* bias, float* y, int64_t ldy) {
  ForEachPanelTile<PanelsPerTileCoded(MR)>(p0, p1, [&](int64_t p, auto np) HWY_ATTR {
    TileCodedFma<MR, decltype(np)::value>(xt, w, p, bias, y, ldy);
  });
}
using RowBlockCodedFmaFn = void (*)(const float*, const PackedMatrix&, int64_t, int64_t,
                                    const float*, float*, int64_t);
template <size_t... I>
constexpr std::array<RowBlockCodedFmaFn, sizeof...(I)> MakeRowBlockCodedFmaTable(
    std::index_sequence<I...>) {
  return {&RowBlockCodedFma<static_cast<int>(I) + 1>...};
}
constexpr auto kRowBlocksCodedFma = MakeRowBlockCodedFmaTable(std::make_index_sequence<kMRCoded>());

// MatmulTile of a coded matrix without bf16_activations, up to kDirectRows
// rows: row blocks of equal size, each over all of K, rebuilding the blocks
// as they multiply them. (More rows widen the panels per group and k range:
// WidenCodedPanels.)
void MatmulTileCodedFma(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  const int64_t rows = r1 - r0, K = a.w->k;
  const int64_t blocks = CeilDiv(rows, kMRCoded), per = CeilDiv(rows, blocks);
  thread_local std::vector<float> xt;  // a row block's x, k-major (one row: x itself)
  for (int64_t r = 0; r < rows; r += per) {
    const int64_t mr = std::min(per, rows - r);
    const float* x = a.x + (r0 + r) * a.ldx;
    if (mr > 1) {
      xt.resize(static_cast<size_t>(K * mr));
      for (int64_t i = 0; i < mr; ++i) {
        for (int64_t k = 0; k < K; ++k) xt[k * mr + i] = x[i * a.ldx + k];
      }
      x = xt.data();
    }
    kRowBlocksCodedFma[mr - 1](x, *a.w, p0, p1, a.bias, a.y + (r0 + r) * a.ldy, a.ldy);
  }
}

// WidenPanels for a coded matrix: panels [pg, pe) over k in [k0, k1) (k0 a
// multiple of kKBlock) as floats, (k1 - k0) * kPanel per panel, each k's
// columns in order.
void WidenCodedPanels(const PackedMatrix& w, int64_t pg, int64_t pe, int64_t k0, int64_t k1,
                      float* HWY_RESTRICT wide) {
  const CodedBf16& c = *w.coded;
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  const __m512i to0 = Index(kToCols0), to1 = Index(kToCols1);
  const int64_t len = (k1 - k0) * kPanel;
  const auto store = [&](float* out, __m512i lo, __m512i hi) HWY_ATTR {
    _mm512_store_ps(out,
                    _mm512_permutex2var_ps(_mm512_castsi512_ps(lo), to0, _mm512_castsi512_ps(hi)));
    _mm512_store_ps(out + 16,
                    _mm512_permutex2var_ps(_mm512_castsi512_ps(lo), to1, _mm512_castsi512_ps(hi)));
  };
  for (int64_t p = pg; p < pe; ++p) {
    float* out = wide + (p - pg) * len;
    for (int64_t b = k0 / kKBlock; b * kKBlock < k1; ++b) {
      const uint8_t* block = c.block(p, b);
      const uint8_t* esc = c.escapes.data() + c.escape_info(p, b)[0];
      const __m512i table = CodedTable(c.table(p, b));
      const bool escapes = c.escape_info(p, b)[1] != 0;
      const int64_t kb = b * kKBlock, n = std::min(kKBlock, k1 - kb);
      for (int64_t q = 0; 2 * q < n; ++q) {
        __m512i lo, hi;
        if (escapes) {
          CodedPair<true>(block, q, table, CodedCodes(block, q), esc, lo, hi);
        } else {
          CodedPair<false>(block, q, table, CodedCodes(block, q), esc, lo, hi);
        }
        float* o = out + (kb - k0 + 2 * q) * kPanel;
        store(o, _mm512_and_si512(lo, high), _mm512_and_si512(hi, high));
        if (2 * q + 1 < n) store(o + kPanel, ShiftUp16(lo), ShiftUp16(hi));
      }
    }
  }
}
