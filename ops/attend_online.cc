// ops/attend_online.h: the scalar reference and a Highway kernel compiled once
// per SIMD target with a native FMA and dispatched at run time.
#include "ops/attend_online.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "hwy/base.h"
#include "hwy/cache_control.h"
#include "ops/bf16.h"
#include "tensor/dtype.h"

#ifndef HUBZOO_OPS_ATTEND_ONLINE_CONSTANTS
#define HUBZOO_OPS_ATTEND_ONLINE_CONSTANTS
namespace hubzoo {
// The element types of keys and values in memory: float, uint16_t (bf16
// bits) and hwy::float16_t (IEEE half bits); the 16-bit ones only in pages.
//
// Block b's keys and values as OnlineAttention places them: through the
// page tables when set, else from kt and values. A value block's lane i is
// at the result + (vfirst + i) * v_stride (vfirst: 0 paged, else the block's
// first key index).
template <class KT>
const KT* BlockKeys(const OnlineAttention& a, int64_t b) {
  if constexpr (std::is_same_v<KT, float>) {
    if (!a.kt_pages) return a.kt + b * a.kt_stride;
  }
  return static_cast<const KT*>(a.kt_pages[b]) + a.kt_offset;
}
template <class VT>
const VT* BlockValues(const OnlineAttention& a, int64_t b) {
  if constexpr (std::is_same_v<VT, float>) {
    if (!a.v_pages) return a.values;
  }
  return static_cast<const VT*>(a.v_pages[b]) + a.v_offset;
}
inline float kv_float(float x) { return x; }
inline float kv_float(uint16_t x) { return bf16_to_float(x); }
inline float kv_float(hwy::float16_t x) { return f16_to_f32(std::bit_cast<uint16_t>(x)); }

// f(T{}) with T the element type of e.
template <class F>
decltype(auto) WithKvType(KvElement e, const F& f) {
  switch (e) {
    case KvElement::kBF16:
      return f(uint16_t{});
    case KvElement::kF16:
      return f(hwy::float16_t{});
    default:
      return f(float{});
  }
}

}  // namespace hubzoo
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attend_online.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/exp_f32-inl.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t AttendOnlineTarget() { return HWY_TARGET; }

// A SIMD kernel needs a true FMA (the definition is in fma chains) and a
// vector length that divides the block.
#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR

using DF = hn::CappedTag<float, kKeyBlock>;
using V = hn::Vec<DF>;
constexpr int64_t kN = static_cast<int64_t>(hn::MaxLanes(DF()));
static_assert(kKeyBlock % kN == 0, "lanes must divide the key block");
constexpr int kS = static_cast<int>(kKeyBlock / kN);  // score vectors per block

// ExpF32: ops/exp_f32-inl.h.

void TransposeKeyBlocks(const float* HWY_RESTRICT keys, int64_t stride, int64_t lane0, int64_t len,
                        int64_t d, float* HWY_RESTRICT kt) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int64_t blocks = key_blocks(lane0, len);
  for (int64_t b = 0; b < blocks; ++b) {
    float* block = kt + b * d * kKeyBlock;
    const int64_t first = b * kKeyBlock - lane0;  // key of lane 0
    if (first >= 0 && first + kKeyBlock <= len &&
        stride * (kKeyBlock - 1) + d < std::numeric_limits<int32_t>::max()) {
      // A full block: lane i of dim c gathered from key first + i.
      for (int s = 0; s < kS; ++s) {
        const auto idx = hn::Mul(hn::Iota(di, static_cast<int32_t>(s * kN)),
                                 hn::Set(di, static_cast<int32_t>(stride)));
        const float* base = keys + first * stride;
        for (int64_t c = 0; c < d; ++c) {
          hn::StoreU(hn::GatherIndex(df, base + c, idx), df, block + c * kKeyBlock + s * kN);
        }
      }
      continue;
    }
    for (int64_t c = 0; c < d; ++c) {
      for (int64_t i = 0; i < kKeyBlock; ++i) {
        const int64_t j = first + i;
        block[c * kKeyBlock + i] = j >= 0 && j < len ? keys[j * stride + c] : 0.0f;
      }
    }
  }
}

// kN keys or values from p as floats: bf16 bits widen exactly (x << 16),
// halves by a hardware conversion (x86: F16C's vcvtph2ps, which every FMA
// target of Highway has).
template <class T>
HWY_INLINE V LoadKv(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<T, hwy::float16_t>) {
    return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<uint32_t, DF> du32;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
  }
}
// The first n (1 .. kN) of them, zeros after; nothing past them is read.
template <class T>
HWY_INLINE V LoadKvN(DF df, const T* HWY_RESTRICT p, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::MaskedLoad(hn::FirstN(df, static_cast<size_t>(n)), df, p);
  } else {
    T buf[kN] = {};
    std::copy_n(p, n, buf);
    return LoadKv(df, buf);
  }
}

// A prefetch every 64 bytes of [p, p + bytes): each line of the range when p
// starts a line (pages and the rows read here do).
HWY_INLINE void PrefetchLines(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) hwy::Prefetch(static_cast<const char*>(p) + o);
}

// Rows interleaved per pass: their FMA chains are independent, so R rows
// keep the FMA unit busy where one row would wait on each chain's latency.
// Score chains take 4 * kS registers per row: 4 rows on AVX-512 (kS = 1),
// 1 on AVX2 (16 registers, kS = 2).
constexpr int kMaxRows = kS == 1 ? 4 : 1;
constexpr int kAccChunk = 4;  // output vectors per row held in registers at a time

// sv[r] = the unscaled scores of the block's 16 lanes for query row r: four
// FMA chains over the dims d % 4 == 0, 1, 2, 3, then (c0 + c1) + (c2 + c3).
template <int R, class KT>
HWY_INLINE void BlockScores(DF df, const float* HWY_RESTRICT q, int64_t q_stride,
                            const KT* HWY_RESTRICT block, int64_t d, V (*HWY_RESTRICT sv)[kS],
                            const KT* ahead) {
  V c[R][4][kS];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 4
      for (int s = 0; s < kS; ++s) c[r][j][s] = hn::Zero(df);
    }
  }
  const auto step = [&](int j, int64_t k) HWY_ATTR {
    V kv[kS];
#pragma GCC unroll 4
    for (int s = 0; s < kS; ++s) kv[s] = LoadKv(df, block + k * kKeyBlock + s * kN);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const V qk = hn::Set(df, q[r * q_stride + k]);
#pragma GCC unroll 4
      for (int s = 0; s < kS; ++s) c[r][j][s] = hn::MulAdd(qk, kv[s], c[r][j][s]);
    }
  };
  int64_t k = 0;
  for (; k + 4 <= d; k += 4) {
    if (ahead) PrefetchLines(ahead + k * kKeyBlock, 4 * kKeyBlock * int64_t{sizeof(KT)});
    step(0, k);
    step(1, k + 1);
    step(2, k + 2);
    step(3, k + 3);
  }
  if (k < d) step(0, k);
  if (k + 1 < d) step(1, k + 1);
  if (k + 2 < d) step(2, k + 2);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int s = 0; s < kS; ++s) {
      sv[r][s] = hn::Add(hn::Add(c[r][0][s], c[r][1][s]), hn::Add(c[r][2][s], c[r][3][s]));
    }
  }
}

// For rows r < R: acc_r[0 .. NC vectors) = acc_r * alpha_r, then acc_r =
// fma(p_r[i], v_i, acc_r) for lanes i in [lo, hi) in order, value of lane i at
// v0 + (first + i) * v_stride (loaded once for all R rows). The last vector
// holds `tail` (1..kN) floats.
template <int NC, int R, class VT>
HWY_INLINE void AccumulateValues(DF df, float* const* HWY_RESTRICT acc, const float* alpha,
                                 const float (*HWY_RESTRICT p)[kKeyBlock], int64_t lo, int64_t hi,
                                 const VT* HWY_RESTRICT v0, int64_t first, int64_t v_stride,
                                 int64_t tail, const VT* ahead) {
  V a[R][NC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const V va = hn::Set(df, alpha[r]);
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) a[r][c] = hn::Mul(hn::LoadU(df, acc[r] + c * kN), va);
  }
  for (int64_t i = lo; i < hi; ++i) {
    if (ahead) PrefetchLines(ahead + i * v_stride, NC * kN * int64_t{sizeof(VT)});
    const VT* v = v0 + (first + i) * v_stride;
    V vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC - 1; ++c) vv[c] = LoadKv(df, v + c * kN);
    vv[NC - 1] = tail == kN ? LoadKv(df, v + (NC - 1) * kN) : LoadKvN(df, v + (NC - 1) * kN, tail);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const V pi = hn::Set(df, p[r][i]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) a[r][c] = hn::MulAdd(pi, vv[c], a[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) hn::StoreU(a[r][c], df, acc[r] + c * kN);
  }
}

// Per-row state of the online softmax.
struct RowState {
  float m;             // running max
  float l[kKeyBlock];  // running sums, per lane
  float* acc;          // d (rounded up to whole vectors) running outputs
};

// sv = sv * scale, lanes outside [lo, hi) -inf.
template <int R>
HWY_INLINE void ScaleAndMask(DF df, float scale, int64_t lo, int64_t hi, V (*HWY_RESTRICT sv)[kS]) {
  const hn::RebindToSigned<DF> di;
  const V neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int s = 0; s < kS; ++s) {
      sv[r][s] = hn::Mul(sv[r][s], hn::Set(df, scale));
      if (lo > 0 || hi < kKeyBlock) {
        const auto lane = hn::Iota(di, static_cast<int32_t>(s * kN));
        const auto visible =
            hn::RebindMask(df, hn::AndNot(hn::Lt(lane, hn::Set(di, static_cast<int32_t>(lo))),
                                          hn::Lt(lane, hn::Set(di, static_cast<int32_t>(hi)))));
        sv[r][s] = hn::IfThenElse(visible, sv[r][s], neg_inf);
      }
    }
  }
}

// The online softmax through one block of (scaled, masked) scores sv: each
// row's running max and sums move on; alpha[r] = exp(m - m'), p[r] the
// block's exp(s_i - m').
template <int R>
HWY_INLINE void SoftmaxStep(DF df, const V (*HWY_RESTRICT sv)[kS], RowState* state, float* alpha,
                            float (*HWY_RESTRICT p)[kKeyBlock]) {
  const V neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    RowState& st = state[r];
    V vmax = neg_inf;
#pragma GCC unroll 4
    for (int s = 0; s < kS; ++s) vmax = hn::Max(vmax, sv[r][s]);
    const float m_new = std::max(st.m, hn::GetLane(hn::MaxOfLanes(df, vmax)));
    alpha[r] = hn::GetLane(ExpF32(df, hn::Set(df, st.m - m_new)));
    st.m = m_new;
    const V va = hn::Set(df, alpha[r]);
#pragma GCC unroll 4
    for (int s = 0; s < kS; ++s) {
      const V ps = ExpF32(df, hn::Sub(sv[r][s], hn::Set(df, m_new)));
      hn::StoreU(hn::MulAdd(hn::LoadU(df, st.l + s * kN), va, ps), df, st.l + s * kN);
      hn::Store(ps, df, p[r] + s * kN);
    }
  }
}

// The block's values into output vectors [v_begin, v_end) of each row's acc
// (acc * alpha, then the visible lanes' p_i v_i in order), kAccChunk vectors
// at a time. Every output float is its own chain: any vector range gives the
// bits the whole row would.
template <int R, class VT>
HWY_INLINE void ValuesStep(DF df, const RowState* state, const float* alpha,
                           const float (*HWY_RESTRICT p)[kKeyBlock], int64_t lo, int64_t hi,
                           const VT* HWY_RESTRICT values, int64_t first, int64_t v_stride,
                           int64_t d, int64_t v_begin, int64_t v_end, const VT* ahead) {
  for (int64_t c0 = v_begin; c0 < v_end; c0 += kAccChunk) {
    const int64_t nc = std::min<int64_t>(kAccChunk, v_end - c0);
    // Floats of the chunk's last vector: a whole vector unless it is the row's last.
    const int64_t tail = std::min<int64_t>(kN, d - (c0 + nc - 1) * kN);
    float* chunk_acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) chunk_acc[r] = state[r].acc + c0 * kN;
    const VT* v0 = values + c0 * kN;
    const VT* a0 = ahead ? ahead + c0 * kN : nullptr;
    switch (nc) {
      case 1:
        AccumulateValues<1, R, VT>(df, chunk_acc, alpha, p, lo, hi, v0, first, v_stride, tail, a0);
        break;
      case 2:
        AccumulateValues<2, R, VT>(df, chunk_acc, alpha, p, lo, hi, v0, first, v_stride, tail, a0);
        break;
      case 3:
        AccumulateValues<3, R, VT>(df, chunk_acc, alpha, p, lo, hi, v0, first, v_stride, tail, a0);
        break;
      default:
        AccumulateValues<4, R, VT>(df, chunk_acc, alpha, p, lo, hi, v0, first, v_stride, tail, a0);
    }
  }
}

// Query rows q, q + q_stride, ... (R of them) through block b.
template <int R, class KT, class VT>
HWY_INLINE void BlockRows(DF df, const float* HWY_RESTRICT q, int64_t q_stride,
                          const KT* HWY_RESTRICT block, int64_t d, float scale, int64_t lo,
                          int64_t hi, const VT* HWY_RESTRICT values, int64_t first,
                          int64_t v_stride, RowState* state, const KT* keys_ahead,
                          const VT* values_ahead) {
  V sv[R][kS];
  BlockScores<R>(df, q, q_stride, block, d, sv, keys_ahead);
  ScaleAndMask<R>(df, scale, lo, hi, sv);
  HWY_ALIGN float p[R][kKeyBlock];
  float alpha[R];
  SoftmaxStep<R>(df, sv, state, alpha, p);
  ValuesStep<R, VT>(df, state, alpha, p, lo, hi, values, first, v_stride, d, 0, (d + kN - 1) / kN,
                    values_ahead);
}

// The visible lanes [lo, hi) of block b of a call, and where its keys and
// values are (lane i's value at values + (first + i) * v_stride).
struct BlockAt {
  int64_t first, lo, hi, vfirst;
  BlockAt(const OnlineAttention& a, int64_t b)
      : first(b * kKeyBlock - a.lane0),
        lo(std::max<int64_t>(0, -first)),
        hi(std::min(kKeyBlock, a.len - first)),
        vfirst(a.v_pages ? 0 : first) {}
};

// Where the loops fetch ahead (OnlineAttention::fetch_ahead): the keys and
// values of block b + kAheadBlocks of a paged cache while block b is
// computed, a line at a time as block b's own are read (a page's prefetches
// in one burst stall the loads behind them). A decode step's pages are cold
// (the layer's weights went through the caches since they were written) and
// each is a block of its own (layers/kv_cache.h), so the hardware
// prefetcher, which stops at page boundaries, does not run ahead. Unpaged
// keys and values are contiguous: no software prefetch. A prefetch never
// faults and changes no result (bench/results/attention_prefetch.md).
constexpr int64_t kAheadBlocks = 2;
template <class KT>
HWY_INLINE const KT* KeysAhead(const OnlineAttention& a, int64_t b, int64_t blocks) {
  return a.fetch_ahead && a.kt_pages && b + kAheadBlocks < blocks
             ? BlockKeys<KT>(a, b + kAheadBlocks)
             : nullptr;
}
template <class VT>
HWY_INLINE const VT* ValuesAhead(const OnlineAttention& a, int64_t b, int64_t blocks) {
  return a.fetch_ahead && a.v_pages && b + kAheadBlocks < blocks
             ? BlockValues<VT>(a, b + kAheadBlocks)
             : nullptr;
}

// Calls f.template operator()<R>(g) for the row groups of nq rows, R <= kMaxRows rows each.
template <class F>
HWY_INLINE void ForRowGroups(int64_t nq, const F& f) {
  for (int64_t g = 0; g < nq; g += kMaxRows) {
    switch (std::min<int64_t>(kMaxRows, nq - g)) {
      case 1:
        f.template operator()<1>(g);
        break;
      case 2:
        f.template operator()<2>(g);
        break;
      case 3:
        f.template operator()<3>(g);
        break;
      default:
        f.template operator()<kMaxRows>(g);
    }
  }
}

// The rows' states and accumulators (nq rows of dv vectors): on the stack
// for the group sizes models have (query heads per KV head times head_dim up
// to 4096 floats, 16 KiB), on the heap for larger ones; no allocation per
// call in practice, and nothing kept between calls. Output vectors
// [v_begin, v_end) of each row start at 0.
class RowStates {
 public:
  RowStates(int64_t nq, int64_t dv, int64_t v_begin, int64_t v_end) {
    float* const acc = nq * dv * kN <= kStackFloats
                           ? acc_stack_
                           : (acc_heap_.resize(nq * dv * kN), acc_heap_.data());
    rows_ = nq <= kStackRows ? rows_stack_ : (rows_heap_.resize(nq), rows_heap_.data());
    for (int64_t g = 0; g < nq; ++g) {
      rows_[g].m = -std::numeric_limits<float>::infinity();
      std::fill_n(rows_[g].l, kKeyBlock, 0.0f);
      rows_[g].acc = acc + g * dv * kN;
      std::fill(rows_[g].acc + v_begin * kN, rows_[g].acc + v_end * kN, 0.0f);
    }
  }
  RowState* get() { return rows_; }

 private:
  static constexpr int64_t kStackFloats = 4096, kStackRows = 64;
  alignas(64) float acc_stack_[kStackFloats];
  RowState rows_stack_[kStackRows];
  std::vector<float> acc_heap_;
  std::vector<RowState> rows_heap_;
  RowState* rows_;
};

// out = acc / L for the dims [dim0, dim1) of each row.
HWY_INLINE void Normalize(const OnlineAttention& a, RowState* state, int64_t dim0, int64_t dim1) {
  for (int64_t g = 0; g < a.nq; ++g) {
    const float total = sum_lanes16(state[g].l);
    float* o = a.out + g * a.out_stride;
    for (int64_t k = dim0; k < dim1; ++k) o[k] = state[g].acc[k] / total;
  }
}

template <class KT, class VT>
void AttendOnlineT(const OnlineAttention& a) {
  const float* HWY_RESTRICT q = a.q;
  const int64_t q_stride = a.q_stride, v_stride = a.v_stride, d = a.d;
  const DF df;
  const int64_t dv = (d + kN - 1) / kN;  // output vectors of a row
  RowStates rows(a.nq, dv, 0, dv);
  RowState* const state = rows.get();
  const int64_t blocks = key_blocks(a.lane0, a.len);
  for (int64_t b = 0; b < blocks; ++b) {
    const KT* block = BlockKeys<KT>(a, b);
    const BlockAt at(a, b);
    const VT* vb = BlockValues<VT>(a, b);
    // The first row group fetches ahead; the others read what it read.
    const KT* kt_ahead = KeysAhead<KT>(a, b, blocks);
    const VT* v_ahead = ValuesAhead<VT>(a, b, blocks);
    ForRowGroups(a.nq, [&]<int R>(int64_t g) HWY_ATTR {
      BlockRows<R, KT, VT>(df, q + g * q_stride, q_stride, block, d, a.scale, at.lo, at.hi, vb,
                           at.vfirst, v_stride, state + g, g == 0 ? kt_ahead : nullptr,
                           g == 0 ? v_ahead : nullptr);
    });
  }
  Normalize(a, state, 0, d);
}

// Keys of the values' type (a cache's pages) or floats (transposed from the
// cache, or no cache): the pairs attention passes. Any other pair runs the
// reference, the same bits.
void AttendOnline(const OnlineAttention& a) {
  if (a.kt_type != a.v_type && a.kt_type != KvElement::kF32) {
    return attend_online_f32_reference(a);
  }
  WithKvType(a.v_type, [&]<class VT>(VT) HWY_ATTR {
    if (a.kt_type == KvElement::kF32) return AttendOnlineT<float, VT>(a);
    AttendOnlineT<VT, VT>(a);
  });
}

// attend_online_scores: BlockRows' scores, stored.
template <class KT>
void OnlineScoresT(const OnlineAttention& a, int64_t b0, int64_t b1, float* HWY_RESTRICT scores) {
  const DF df;
  const int64_t blocks = key_blocks(a.lane0, a.len);
  for (int64_t b = b0; b < b1; ++b) {
    const KT* block = BlockKeys<KT>(a, b);
    const BlockAt at(a, b);
    const KT* kt_ahead = KeysAhead<KT>(a, b, b1);
    ForRowGroups(a.nq, [&]<int R>(int64_t g) HWY_ATTR {
      V sv[R][kS];
      BlockScores<R>(df, a.q + g * a.q_stride, a.q_stride, block, a.d, sv,
                     g == 0 ? kt_ahead : nullptr);
      ScaleAndMask<R>(df, a.scale, at.lo, at.hi, sv);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int s = 0; s < kS; ++s)
          hn::StoreU(sv[r][s], df, scores + ((g + r) * blocks + b) * kKeyBlock + s * kN);
      }
    });
  }
}

void OnlineScores(const OnlineAttention& a, int64_t b0, int64_t b1, float* scores) {
  WithKvType(a.kt_type, [&]<class KT>(KT) HWY_ATTR { OnlineScoresT<KT>(a, b0, b1, scores); });
}

// attend_online_values: BlockRows' softmax and values steps from the stored
// scores, for the output vectors of dims [dim0, dim1) only.
template <class VT>
void OnlineValuesT(const OnlineAttention& a, const float* HWY_RESTRICT scores, int64_t dim0,
                   int64_t dim1) {
  const DF df;
  const int64_t blocks = key_blocks(a.lane0, a.len), d = a.d;
  const int64_t v_begin = dim0 / kN, v_end = (dim1 + kN - 1) / kN;
  RowStates rows(a.nq, (d + kN - 1) / kN, v_begin, v_end);
  RowState* const state = rows.get();
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockAt at(a, b);
    const VT* vb = BlockValues<VT>(a, b);
    const VT* v_ahead = ValuesAhead<VT>(a, b, blocks);
    ForRowGroups(a.nq, [&]<int R>(int64_t g) HWY_ATTR {
      V sv[R][kS];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int s = 0; s < kS; ++s)
          sv[r][s] = hn::LoadU(df, scores + ((g + r) * blocks + b) * kKeyBlock + s * kN);
      }
      HWY_ALIGN float p[R][kKeyBlock];
      float alpha[R];
      SoftmaxStep<R>(df, sv, state + g, alpha, p);
      ValuesStep<R, VT>(df, state + g, alpha, p, at.lo, at.hi, vb, at.vfirst, a.v_stride, d,
                        v_begin, v_end, g == 0 ? v_ahead : nullptr);
    });
  }
  Normalize(a, state, dim0, dim1);
}

void OnlineValues(const OnlineAttention& a, const float* scores, int64_t dim0, int64_t dim1) {
  WithKvType(a.v_type, [&]<class VT>(VT) HWY_ATTR { OnlineValuesT<VT>(a, scores, dim0, dim1); });
}

#else  // no native FMA: the scalar reference

void TransposeKeyBlocks(const float* keys, int64_t stride, int64_t lane0, int64_t len, int64_t d,
                        float* kt) {
  transpose_key_blocks_reference(keys, stride, lane0, len, d, kt);
}

void AttendOnline(const OnlineAttention& a) { attend_online_f32_reference(a); }

void OnlineScores(const OnlineAttention& a, int64_t b0, int64_t b1, float* scores) {
  attend_online_scores_reference(a, b0, b1, scores);
}

void OnlineValues(const OnlineAttention& a, const float* scores, int64_t dim0, int64_t dim1) {
  attend_online_values_reference(a, scores, dim0, dim1);
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

float exp_f32(float x) {
  using namespace expf32;
  if (!(x >= kMin)) return 0.0f;
  x = std::min(x, kMax);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kC1, x);
  r = std::fma(n, -kC2, r);
  float y = kP0;
  y = std::fma(y, r, kP1);
  y = std::fma(y, r, kP2);
  y = std::fma(y, r, kP3);
  y = std::fma(y, r, kP4);
  y = std::fma(y, r, kP5);
  const float r2 = r * r;
  y = std::fma(y, r2, r);
  y = y + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return y * two_n;
}

void transpose_key_blocks_reference(const float* keys, int64_t stride, int64_t lane0, int64_t len,
                                    int64_t d, float* kt) {
  const int64_t blocks = key_blocks(lane0, len);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t c = 0; c < d; ++c) {
      for (int64_t i = 0; i < kKeyBlock; ++i) {
        const int64_t j = b * kKeyBlock + i - lane0;
        kt[(b * d + c) * kKeyBlock + i] = j >= 0 && j < len ? keys[j * stride + c] : 0.0f;
      }
    }
  }
}

namespace {

template <class KT>
void scores_reference(const OnlineAttention& a, int64_t b0, int64_t b1, float* scores) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t blocks = key_blocks(a.lane0, a.len), d = a.d;
  for (int64_t g = 0; g < a.nq; ++g) {
    const float* qg = a.q + g * a.q_stride;
    for (int64_t b = b0; b < b1; ++b) {
      const KT* block = BlockKeys<KT>(a, b);
      const int64_t first = b * kKeyBlock - a.lane0;
      float* s = scores + (g * blocks + b) * kKeyBlock;
      for (int64_t i = 0; i < kKeyBlock; ++i) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t k = 0; k < d; ++k)
          c[k % 4] = std::fma(qg[k], kv_float(block[k * kKeyBlock + i]), c[k % 4]);
        const float sum = (c[0] + c[1]) + (c[2] + c[3]);
        s[i] = first + i >= 0 && first + i < a.len ? sum * a.scale : -inf;
      }
    }
  }
}

template <class VT>
void values_reference(const OnlineAttention& a, const float* scores, int64_t dim0, int64_t dim1) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t blocks = key_blocks(a.lane0, a.len);
  std::vector<float> acc(a.d);
  for (int64_t g = 0; g < a.nq; ++g) {
    float m = -inf, l[kKeyBlock] = {};
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * kKeyBlock - a.lane0;
      // Lane i's value at vb + (vfirst + i) * v_stride.
      const VT* vb = BlockValues<VT>(a, b);
      const int64_t vfirst = a.v_pages ? 0 : first;
      const float* s = scores + (g * blocks + b) * kKeyBlock;
      float p[kKeyBlock];
      float block_max = -inf;
      for (int64_t i = 0; i < kKeyBlock; ++i) block_max = std::max(block_max, s[i]);
      const float m_new = std::max(m, block_max);
      const float alpha = exp_f32(m - m_new);
      m = m_new;
      for (int64_t i = 0; i < kKeyBlock; ++i) {
        p[i] = exp_f32(s[i] - m_new);
        l[i] = std::fma(l[i], alpha, p[i]);
      }
      for (int64_t k = dim0; k < dim1; ++k) {
        float x = acc[k] * alpha;
        for (int64_t i = 0; i < kKeyBlock; ++i) {
          if (first + i >= 0 && first + i < a.len) {
            x = std::fma(p[i], kv_float(vb[(vfirst + i) * a.v_stride + k]), x);
          }
        }
        acc[k] = x;
      }
    }
    const float total = sum_lanes16(l);
    for (int64_t k = dim0; k < dim1; ++k) a.out[g * a.out_stride + k] = acc[k] / total;
  }
}

void zero_out(const OnlineAttention& a, int64_t dim0, int64_t dim1) {
  for (int64_t g = 0; g < a.nq; ++g)
    std::fill(a.out + g * a.out_stride + dim0, a.out + g * a.out_stride + dim1, 0.0f);
}

}  // namespace

void attend_online_scores_reference(const OnlineAttention& a, int64_t b0, int64_t b1,
                                    float* scores) {
  WithKvType(a.kt_type, [&]<class KT>(KT) { scores_reference<KT>(a, b0, b1, scores); });
}

void attend_online_values_reference(const OnlineAttention& a, const float* scores, int64_t dim0,
                                    int64_t dim1) {
  if (a.len <= 0) return zero_out(a, dim0, dim1);
  WithKvType(a.v_type, [&]<class VT>(VT) { values_reference<VT>(a, scores, dim0, dim1); });
}

void attend_online_f32_reference(const OnlineAttention& a) {
  if (a.len <= 0) return zero_out(a, 0, a.d);
  std::vector<float> scores(a.nq * key_blocks(a.lane0, a.len) * kKeyBlock);
  attend_online_scores_reference(a, 0, key_blocks(a.lane0, a.len), scores.data());
  attend_online_values_reference(a, scores.data(), 0, a.d);
}

HWY_EXPORT(AttendOnlineTarget);
HWY_EXPORT(TransposeKeyBlocks);
HWY_EXPORT(AttendOnline);
HWY_EXPORT(OnlineScores);
HWY_EXPORT(OnlineValues);

void transpose_key_blocks(const float* keys, int64_t stride, int64_t lane0, int64_t len, int64_t d,
                          float* kt) {
  if (len > 0) HWY_DYNAMIC_DISPATCH(TransposeKeyBlocks)(keys, stride, lane0, len, d, kt);
}

void attend_online_f32(const OnlineAttention& a) {
  if (a.len <= 0) {
    for (int64_t g = 0; g < a.nq; ++g) std::fill_n(a.out + g * a.out_stride, a.d, 0.0f);
    return;
  }
  HWY_DYNAMIC_DISPATCH(AttendOnline)(a);
}

void attend_online_scores(const OnlineAttention& a, int64_t b0, int64_t b1, float* scores) {
  if (a.len > 0 && b0 < b1) HWY_DYNAMIC_DISPATCH(OnlineScores)(a, b0, b1, scores);
}

void attend_online_values(const OnlineAttention& a, const float* scores, int64_t dim0,
                          int64_t dim1) {
  if (a.len <= 0) return zero_out(a, dim0, dim1);
  if (dim0 < dim1) HWY_DYNAMIC_DISPATCH(OnlineValues)(a, scores, dim0, dim1);
}

const char* attend_online_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(AttendOnlineTarget)());
}

}  // namespace hubzoo
#endif  // HWY_ONCE
