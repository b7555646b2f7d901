// ops/attend_online.h: the scalar reference and a Highway kernel compiled once
// per SIMD target with a native FMA and dispatched at run time.
#include "ops/attend_online.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#ifndef HUBZOO_OPS_ATTEND_ONLINE_CONSTANTS
#define HUBZOO_OPS_ATTEND_ONLINE_CONSTANTS
namespace hubzoo::expf32 {
// Cephes expf: exp(x) = 2^n exp(r), n = round(x log2 e), r = x - n ln 2 in two
// steps (C1 has few mantissa bits, so n * C1 is exact), exp(r) a degree-7
// polynomial 1 + r + r^2 (p5 + r (p4 + ...)).
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kC1 = 0.693359375f, kC2 = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
constexpr float kMin = -87.0f;  // below: 0 (2^n stays a normal number above it)
constexpr float kMax = 88.0f;   // above: clamped (n <= 127)
}  // namespace hubzoo::expf32

namespace hubzoo {
// Lanes of l summed pairwise: i + 8, then i + 4, i + 2, i + 1 (ops/attend_online.h).
inline float sum_lanes16(float* l) {
  for (int w = 8; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) l[i] = l[i] + l[i + w];
  }
  return l[0];
}
}  // namespace hubzoo
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attend_online.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

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

// exp_f32(), lane by lane, with the same operations in the same order.
HWY_INLINE V ExpF32(DF d, V x) {
  using namespace expf32;
  const hn::RebindToSigned<DF> di;
  const auto keep = hn::Ge(x, hn::Set(d, kMin));
  x = hn::Min(x, hn::Set(d, kMax));
  const V n = hn::Round(hn::Mul(x, hn::Set(d, kLog2e)));
  V r = hn::MulAdd(n, hn::Set(d, -kC1), x);
  r = hn::MulAdd(n, hn::Set(d, -kC2), r);
  V y = hn::Set(d, kP0);
  y = hn::MulAdd(y, r, hn::Set(d, kP1));
  y = hn::MulAdd(y, r, hn::Set(d, kP2));
  y = hn::MulAdd(y, r, hn::Set(d, kP3));
  y = hn::MulAdd(y, r, hn::Set(d, kP4));
  y = hn::MulAdd(y, r, hn::Set(d, kP5));
  y = hn::MulAdd(y, hn::Mul(r, r), r);
  y = hn::Add(y, hn::Set(d, 1.0f));
  const auto e = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::IfThenElseZero(keep, hn::Mul(y, hn::BitCast(d, e)));
}

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

// sv = the unscaled scores of the block's 16 lanes: four FMA chains over the
// dims d % 4 == 0, 1, 2, 3, then (c0 + c1) + (c2 + c3).
HWY_INLINE void BlockScores(DF df, const float* HWY_RESTRICT q, const float* HWY_RESTRICT block,
                            int64_t d, V* HWY_RESTRICT sv) {
  V c0[kS], c1[kS], c2[kS], c3[kS];
#pragma GCC unroll 4
  for (int s = 0; s < kS; ++s) c0[s] = c1[s] = c2[s] = c3[s] = hn::Zero(df);
  const auto step = [&](V* c, int64_t k) HWY_ATTR {
    const V qk = hn::Set(df, q[k]);
#pragma GCC unroll 4
    for (int s = 0; s < kS; ++s) {
      c[s] = hn::MulAdd(qk, hn::LoadU(df, block + k * kKeyBlock + s * kN), c[s]);
    }
  };
  int64_t k = 0;
  for (; k + 4 <= d; k += 4) {
    step(c0, k);
    step(c1, k + 1);
    step(c2, k + 2);
    step(c3, k + 3);
  }
  if (k < d) step(c0, k);
  if (k + 1 < d) step(c1, k + 1);
  if (k + 2 < d) step(c2, k + 2);
#pragma GCC unroll 4
  for (int s = 0; s < kS; ++s) sv[s] = hn::Add(hn::Add(c0[s], c1[s]), hn::Add(c2[s], c3[s]));
}

// acc[0 .. NC vectors) = acc * alpha, then acc = fma(p[i], v_i, acc) for lanes
// i in [lo, hi), value of lane i at v0 + (first + i) * v_stride: NC independent FMA
// chains held in registers. The last vector holds `tail` (1..kN) floats.
template <int NC>
HWY_INLINE void AccumulateValues(DF df, float* HWY_RESTRICT acc, V alpha,
                                 const float* HWY_RESTRICT p, int64_t lo, int64_t hi,
                                 const float* HWY_RESTRICT v0, int64_t first, int64_t v_stride,
                                 int64_t tail) {
  V a[NC];
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) a[c] = hn::Mul(hn::LoadU(df, acc + c * kN), alpha);
  if (tail == kN) {
    for (int64_t i = lo; i < hi; ++i) {
      const V pi = hn::Set(df, p[i]);
      const float* v = v0 + (first + i) * v_stride;
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) a[c] = hn::MulAdd(pi, hn::LoadU(df, v + c * kN), a[c]);
    }
  } else {
    const auto last = hn::FirstN(df, static_cast<size_t>(tail));
    for (int64_t i = lo; i < hi; ++i) {
      const V pi = hn::Set(df, p[i]);
      const float* v = v0 + (first + i) * v_stride;
#pragma GCC unroll 8
      for (int c = 0; c < NC - 1; ++c) a[c] = hn::MulAdd(pi, hn::LoadU(df, v + c * kN), a[c]);
      a[NC - 1] = hn::MulAdd(pi, hn::MaskedLoad(last, df, v + (NC - 1) * kN), a[NC - 1]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) hn::StoreU(a[c], df, acc + c * kN);
}

// Up to kRows query rows go through the blocks together: each block of keys
// and values is loaded from L1 for all of them.
constexpr int64_t kRows = 8;
constexpr int64_t kAccChunk = 8;  // output vectors of a row held in registers at a time

void AttendOnline(const float* HWY_RESTRICT q, int64_t q_stride, int64_t nq,
                  const float* HWY_RESTRICT kt, const float* HWY_RESTRICT values, int64_t v_stride,
                  int64_t lane0, int64_t len, int64_t d, float scale, float* HWY_RESTRICT out,
                  int64_t out_stride) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int64_t dv = (d + kN - 1) / kN;  // output vectors of a row
  const int64_t blocks = key_blocks(lane0, len);
  thread_local std::vector<float> acc_buf;
  acc_buf.resize(kRows * dv * kN);
  const V neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  for (int64_t g0 = 0; g0 < nq; g0 += kRows) {
    const int64_t rows = std::min(kRows, nq - g0);
    float m[kRows];
    V l[kRows][kS];
    std::fill_n(acc_buf.data(), rows * dv * kN, 0.0f);
    for (int64_t g = 0; g < rows; ++g) {
      m[g] = -std::numeric_limits<float>::infinity();
      for (int s = 0; s < kS; ++s) l[g][s] = hn::Zero(df);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const float* block = kt + b * d * kKeyBlock;
      const int64_t first = b * kKeyBlock - lane0;  // key index of lane 0
      const int64_t lo = std::max<int64_t>(0, -first), hi = std::min(kKeyBlock, len - first);
      for (int64_t g = 0; g < rows; ++g) {
        const float* qg = q + (g0 + g) * q_stride;
        V sv[kS];
        BlockScores(df, qg, block, d, sv);
        V vmax = neg_inf;
        for (int s = 0; s < kS; ++s) {
          sv[s] = hn::Mul(sv[s], hn::Set(df, scale));
          if (lo > 0 || hi < kKeyBlock) {
            const auto lane = hn::Iota(di, static_cast<int32_t>(s * kN));
            const auto visible =
                hn::RebindMask(df, hn::AndNot(hn::Lt(lane, hn::Set(di, static_cast<int32_t>(lo))),
                                              hn::Lt(lane, hn::Set(di, static_cast<int32_t>(hi)))));
            sv[s] = hn::IfThenElse(visible, sv[s], neg_inf);
          }
          vmax = hn::Max(vmax, sv[s]);
        }
        const float m_new = std::max(m[g], hn::GetLane(hn::MaxOfLanes(df, vmax)));
        const float alpha = hn::GetLane(ExpF32(df, hn::Set(df, m[g] - m_new)));
        m[g] = m_new;
        const V va = hn::Set(df, alpha);
        HWY_ALIGN float p[kKeyBlock];
        for (int s = 0; s < kS; ++s) {
          const V ps = ExpF32(df, hn::Sub(sv[s], hn::Set(df, m_new)));
          l[g][s] = hn::MulAdd(l[g][s], va, ps);
          hn::Store(ps, df, p + s * kN);
        }
        float* acc = acc_buf.data() + g * dv * kN;
        for (int64_t c0 = 0; c0 < dv; c0 += kAccChunk) {
          const int64_t nc = std::min(kAccChunk, dv - c0);
          const float* v0 = values + c0 * kN;                // lane i: v0 + (first + i) * v_stride
          const int64_t tail = d - c0 * kN - (nc - 1) * kN;  // floats of the last vector
          switch (nc) {
            case 1:
              AccumulateValues<1>(df, acc + c0 * kN, va, p, lo, hi, v0, first, v_stride, tail);
              break;
            case 2:
              AccumulateValues<2>(df, acc + c0 * kN, va, p, lo, hi, v0, first, v_stride, tail);
              break;
            case 3:
              AccumulateValues<3>(df, acc + c0 * kN, va, p, lo, hi, v0, first, v_stride, tail);
              break;
            case 4:
              AccumulateValues<4>(df, acc + c0 * kN, va, p, lo, hi, v0, first, v_stride, tail);
              break;
            case 5:
              AccumulateValues<5>(df, acc + c0 * kN, va, p, lo, hi, v0, first, v_stride, tail);
              break;
            case 6:
              AccumulateValues<6>(df, acc + c0 * kN, va, p, lo, hi, v0, first, v_stride, tail);
              break;
            case 7:
              AccumulateValues<7>(df, acc + c0 * kN, va, p, lo, hi, v0, first, v_stride, tail);
              break;
            default:
              AccumulateValues<8>(df, acc + c0 * kN, va, p, lo, hi, v0, first, v_stride, tail);
          }
        }
      }
    }
    for (int64_t g = 0; g < rows; ++g) {
      HWY_ALIGN float lanes[kKeyBlock];
      for (int s = 0; s < kS; ++s) hn::Store(l[g][s], df, lanes + s * kN);
      const float total = sum_lanes16(lanes);
      const float* acc = acc_buf.data() + g * dv * kN;
      float* o = out + (g0 + g) * out_stride;
      for (int64_t k = 0; k < d; ++k) o[k] = acc[k] / total;
    }
  }
}

#else  // no native FMA: the scalar reference

void TransposeKeyBlocks(const float* keys, int64_t stride, int64_t lane0, int64_t len, int64_t d,
                        float* kt) {
  transpose_key_blocks_reference(keys, stride, lane0, len, d, kt);
}

void AttendOnline(const float* q, int64_t q_stride, int64_t nq, const float* kt,
                  const float* values, int64_t v_stride, int64_t lane0, int64_t len, int64_t d,
                  float scale, float* out, int64_t out_stride) {
  attend_online_f32_reference(q, q_stride, nq, kt, values, v_stride, lane0, len, d, scale, out,
                              out_stride);
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

void attend_online_f32_reference(const float* q, int64_t q_stride, int64_t nq, const float* kt,
                                 const float* values, int64_t v_stride, int64_t lane0, int64_t len,
                                 int64_t d, float scale, float* out, int64_t out_stride) {
  if (len <= 0) {
    for (int64_t g = 0; g < nq; ++g) std::fill_n(out + g * out_stride, d, 0.0f);
    return;
  }
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t blocks = key_blocks(lane0, len);
  std::vector<float> acc(d);
  for (int64_t g = 0; g < nq; ++g) {
    const float* qg = q + g * q_stride;
    float m = -inf, l[kKeyBlock] = {};
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      const float* block = kt + b * d * kKeyBlock;
      const int64_t first = b * kKeyBlock - lane0;
      float s[kKeyBlock], p[kKeyBlock];
      float block_max = -inf;
      for (int64_t i = 0; i < kKeyBlock; ++i) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t k = 0; k < d; ++k)
          c[k % 4] = std::fma(qg[k], block[k * kKeyBlock + i], c[k % 4]);
        const float sum = (c[0] + c[1]) + (c[2] + c[3]);
        s[i] = first + i >= 0 && first + i < len ? sum * scale : -inf;
        block_max = std::max(block_max, s[i]);
      }
      const float m_new = std::max(m, block_max);
      const float alpha = exp_f32(m - m_new);
      m = m_new;
      for (int64_t i = 0; i < kKeyBlock; ++i) {
        p[i] = exp_f32(s[i] - m_new);
        l[i] = std::fma(l[i], alpha, p[i]);
      }
      for (int64_t k = 0; k < d; ++k) {
        float a = acc[k] * alpha;
        for (int64_t i = 0; i < kKeyBlock; ++i) {
          if (first + i >= 0 && first + i < len) {
            a = std::fma(p[i], values[(first + i) * v_stride + k], a);
          }
        }
        acc[k] = a;
      }
    }
    const float total = sum_lanes16(l);
    for (int64_t k = 0; k < d; ++k) out[g * out_stride + k] = acc[k] / total;
  }
}

HWY_EXPORT(AttendOnlineTarget);
HWY_EXPORT(TransposeKeyBlocks);
HWY_EXPORT(AttendOnline);

void transpose_key_blocks(const float* keys, int64_t stride, int64_t lane0, int64_t len, int64_t d,
                          float* kt) {
  if (len > 0) HWY_DYNAMIC_DISPATCH(TransposeKeyBlocks)(keys, stride, lane0, len, d, kt);
}

void attend_online_f32(const float* q, int64_t q_stride, int64_t nq, const float* kt,
                       const float* values, int64_t v_stride, int64_t lane0, int64_t len, int64_t d,
                       float scale, float* out, int64_t out_stride) {
  if (len <= 0) {
    for (int64_t g = 0; g < nq; ++g) std::fill_n(out + g * out_stride, d, 0.0f);
    return;
  }
  HWY_DYNAMIC_DISPATCH(AttendOnline)
  (q, q_stride, nq, kt, values, v_stride, lane0, len, d, scale, out, out_stride);
}

const char* attend_online_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(AttendOnlineTarget)());
}

}  // namespace hubzoo
#endif  // HWY_ONCE
