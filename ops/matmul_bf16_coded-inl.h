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

// One k block of NP panels (p0 first) into acc, MR rows of x pairs at xp
// (the block's first pair).
template <int MR, int NP, bool kEscapes>
HWY_INLINE void CodedBlockDot(const CodedBf16& c, int64_t p0, int64_t b, int64_t pairs,
                              const uint32_t* HWY_RESTRICT xp, int64_t ldxp,
                              __m512 (&acc)[MR][NP][2]) {
  const uint8_t* block[NP];
  const uint8_t* esc[NP];
  __m512i table[NP];
#pragma GCC unroll 4
  for (int p = 0; p < NP; ++p) {
    block[p] = c.block(p0 + p, b);
    esc[p] = c.escapes.data() + c.escape_info(p0 + p, b)[0];
    table[p] = CodedTable(c.table(p0 + p, b));
  }
  for (int64_t q = 0; q < pairs; ++q) {
    __m512i lo[NP], hi[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      CodedPair<kEscapes>(block[p], q, table[p], CodedCodes(block[p], q), esc[p], lo[p], hi[p]);
    }
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

// TileDot over all of K (first and last) of NP coded panels from p0.
template <int MR, int NP>
HWY_INLINE void TileCoded(const uint32_t* HWY_RESTRICT xp, int64_t ldxp, const PackedMatrix& w,
                          int64_t p0, const float* HWY_RESTRICT bias, float* HWY_RESTRICT y,
                          int64_t ldy) {
  const CodedBf16& c = *w.coded;
  const int64_t K = w.k;
  __m512 total[MR][NP][2];
  __m512 acc[MR][NP][2];
#pragma GCC unroll 64
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) total[r][p][0] = total[r][p][1] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < c.kblocks; ++b) {
    const int64_t k0 = b * kKBlock, pairs = (std::min(kKBlock, K - k0) + 1) / 2;
#pragma GCC unroll 64
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) acc[r][p][0] = acc[r][p][1] = _mm512_setzero_ps();
    }
    bool escapes = false;
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) escapes = escapes || c.escape_info(p0 + p, b)[1] != 0;
    if (escapes) {
      CodedBlockDot<MR, NP, true>(c, p0, b, pairs, xp + k0 / 2, ldxp, acc);
    } else {
      CodedBlockDot<MR, NP, false>(c, p0, b, pairs, xp + k0 / 2, ldxp, acc);
    }
    AddBlockSums<MR, NP>(total, acc);
  }
  StoreTotalsDot<MR, NP>(total, bias ? bias + p0 * kPanel : nullptr, y + p0 * kPanel, ldy,
                         w.n - p0 * kPanel);
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
