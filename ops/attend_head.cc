// Highway kernels of ops/attend_head.h. As in ops/dot_axpy.cc, every product
// is rounded on its own (ops/rounded_product-inl.h).
#include "ops/attend_head.h"

#include <algorithm>

#include "ops/dot_axpy.h"
#include "ops/elementwise.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attend_head.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/rounded_product-inl.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

int64_t AttendHeadTarget() { return HWY_TARGET; }

// scores[j] = dot(q, k_j) for j in [0, len): the 8-lane order of dot(), eight
// keys at a time so that their independent add chains overlap.
void Scores(const float* HWY_RESTRICT q, const float* HWY_RESTRICT keys, int64_t row_stride,
            int64_t len, int64_t d, float* HWY_RESTRICT scores) {
  const hn::CappedTag<float, 8> d8;
  constexpr size_t kN = hn::MaxLanes(d8);
  static_assert(8 % kN == 0, "lanes must divide 8");
  constexpr int kVecs = static_cast<int>(8 / kN);
  constexpr int kKeys = 8;
  using V = hn::Vec<decltype(d8)>;
  const int64_t blocks = d / 8;
  const auto finish = [&](const float(&s)[8], const float* k) {
    float total = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    for (int64_t i = blocks * 8; i < d; ++i) total += ScalarProduct(q[i], k[i]);
    return total;
  };
  int64_t j = 0;
  for (; j + kKeys <= len; j += kKeys) {
    V acc[kKeys][kVecs];
    for (int t = 0; t < kKeys; ++t) {
      for (int v = 0; v < kVecs; ++v) acc[t][v] = hn::Zero(d8);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      for (int v = 0; v < kVecs; ++v) {
        const V qv = hn::LoadU(d8, q + b * 8 + v * kN);
        for (int t = 0; t < kKeys; ++t) {
          const float* k = keys + (j + t) * row_stride + b * 8 + v * kN;
          acc[t][v] = hn::Add(acc[t][v], Product(qv, hn::LoadU(d8, k)));
        }
      }
    }
    for (int t = 0; t < kKeys; ++t) {
      float s[8];
      for (int v = 0; v < kVecs; ++v) hn::StoreU(acc[t][v], d8, s + v * kN);
      scores[j + t] = finish(s, keys + (j + t) * row_stride);
    }
  }
  for (; j < len; ++j) {
    V acc[kVecs];
    for (int v = 0; v < kVecs; ++v) acc[v] = hn::Zero(d8);
    for (int64_t b = 0; b < blocks; ++b) {
      for (int v = 0; v < kVecs; ++v) {
        const float* k = keys + j * row_stride + b * 8 + v * kN;
        acc[v] = hn::Add(acc[v], Product(hn::LoadU(d8, q + b * 8 + v * kN), hn::LoadU(d8, k)));
      }
    }
    float s[8];
    for (int v = 0; v < kVecs; ++v) hn::StoreU(acc[v], d8, s + v * kN);
    scores[j] = finish(s, keys + j * row_stride);
  }
}

// out[0..d) = sum_j p[j] * v_j, from 0, j in order, each product rounded:
// what a zero fill and len axpy() calls give. Columns in chunks of up to 8
// vectors held in registers across all j.
void WeightedSum(const float* HWY_RESTRICT p, const float* HWY_RESTRICT values, int64_t row_stride,
                 int64_t len, int64_t d, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int kChunk = 8;
  int64_t c0 = 0;
  for (; c0 + lanes <= d; c0 += kChunk * lanes) {
    const int nv = static_cast<int>(std::min<int64_t>(kChunk, (d - c0) / lanes));
    V acc[kChunk];
#pragma GCC unroll 8
    for (int c = 0; c < kChunk; ++c) acc[c] = hn::Zero(df);
    for (int64_t j = 0; j < len; ++j) {
      const V pj = hn::Set(df, p[j]);
      const float* v = values + j * row_stride + c0;
#pragma GCC unroll 8
      for (int c = 0; c < kChunk; ++c) {
        if (c < nv) acc[c] = hn::Add(acc[c], Product(pj, hn::LoadU(df, v + c * lanes)));
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < kChunk; ++c) {
      if (c < nv) hn::StoreU(acc[c], df, out + c0 + c * lanes);
    }
    if (nv < kChunk) {
      c0 += nv * lanes;
      break;
    }
  }
  for (; c0 < d; ++c0) {
    float acc = 0.0f;
    for (int64_t j = 0; j < len; ++j) acc += ScalarProduct(p[j], values[j * row_stride + c0]);
    out[c0] = acc;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace hubzoo {

HWY_EXPORT(AttendHeadTarget);
HWY_EXPORT(Scores);
HWY_EXPORT(WeightedSum);

void attend_head_f32(const float* q, const float* keys, const float* values, int64_t row_stride,
                     int64_t len, int64_t d, float scale, float* scores, float* out) {
  if (len <= 0) {
    std::fill_n(out, d, 0.0f);
    return;
  }
  HWY_DYNAMIC_DISPATCH(Scores)(q, keys, row_stride, len, d, scores);
  for (int64_t j = 0; j < len; ++j) scores[j] *= scale;
  softmax_inplace(scores, len);
  HWY_DYNAMIC_DISPATCH(WeightedSum)(scores, values, row_stride, len, d, out);
}

void attend_head_f32_reference(const float* q, const float* keys, const float* values,
                               int64_t row_stride, int64_t len, int64_t d, float scale,
                               float* scores, float* out) {
  for (int64_t j = 0; j < len; ++j) scores[j] = dot_reference(q, keys + j * row_stride, d) * scale;
  softmax_inplace(scores, len);
  std::fill_n(out, d, 0.0f);
  for (int64_t j = 0; j < len; ++j) axpy_reference(scores[j], values + j * row_stride, out, d);
}

const char* attend_head_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(AttendHeadTarget)());
}

}  // namespace hubzoo
#endif  // HWY_ONCE
