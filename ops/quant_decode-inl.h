// Per-target part of ops/quant_matmul.cc, split off for size: the vector
// types of the quantized kernels and the per-type block decoders (exact
// dequantization to float32, and the int8 mode's widened int16 form).
// Included by ops/quant_matmul.cc only, after hwy/highway.h and its shared
// section (quant::kNR, quant::Int8Weights), once per target (Highway's -inl.h
// convention); compiled with its -ffp-contract=off.
#if defined(HUBZOO_OPS_QUANT_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HUBZOO_OPS_QUANT_DECODE_INL_H_
#undef HUBZOO_OPS_QUANT_DECODE_INL_H_
#else
#define HUBZOO_OPS_QUANT_DECODE_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"

HWY_BEFORE_NAMESPACE();
namespace hubzoo {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using V = hn::Vec<DF>;
constexpr int64_t kN = static_cast<int64_t>(hn::MaxLanes(DF()));
static_assert(16 % kN == 0, "16 lanes must be whole vectors");
constexpr int kV = static_cast<int>(16 / kN);  // vectors per 16 lanes

// N bytes at p widened to int32 lanes.
HWY_INLINE hn::Vec<DI> LoadU8(const uint8_t* p) {
  const hn::Rebind<uint8_t, DI> d8;
  return hn::BitCast(DI(), hn::PromoteTo(hn::Rebind<uint32_t, DF>(), hn::LoadU(d8, p)));
}
HWY_INLINE hn::Vec<DI> LoadI8(const uint8_t* p) {
  const hn::Rebind<int8_t, DI> d8;
  return hn::PromoteTo(DI(), hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)));
}
HWY_INLINE V ToF(hn::Vec<DI> q) { return hn::ConvertTo(DF(), q); }
// Nibble (low for element e < 16, high otherwise) of qs[e % 16].
HWY_INLINE hn::Vec<DI> Nibbles(const uint8_t* qs, int64_t e) {
  const auto b = LoadU8(qs + e % 16);
  return e < 16 ? hn::And(b, hn::Set(DI(), 0xF)) : hn::ShiftRight<4>(b);
}

// The eight 6-bit scales and mins of a Q4_K/Q5_K block (its 12 packed
// bytes), unpacked with four 32-bit word operations instead of per byte:
// scales 0-3 and mins 0-3 are the low 6 bits of bytes 0-3 and 4-7; scale
// j >= 4 is byte j+4's low nibble | bits 6-7 of byte j-4 above it, min j >= 4
// byte j+4's high nibble | bits 6-7 of byte j.
struct K4Scales {
  uint8_t sc[8], m[8];
};
HWY_INLINE K4Scales UnpackK4(const uint8_t* s) {
  uint32_t u[3];
  for (int i = 0; i < 3; ++i) {
    u[i] = s[4 * i] | (s[4 * i + 1] << 8) | (s[4 * i + 2] << 16) | (uint32_t{s[4 * i + 3]} << 24);
  }
  constexpr uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const uint32_t w[4] = {u[0] & k6, (u[2] & k4) | (((u[0] >> 6) & k2) << 4), u[1] & k6,
                         ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4)};
  K4Scales r;
  for (int i = 0; i < 8; ++i) {
    r.sc[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
    r.m[i] = static_cast<uint8_t>(w[2 + i / 4] >> (8 * (i % 4)));
  }
  return r;
}

// out[i] = d * float(p[i]) for N bytes (signed or not): exact products,
// vectorised (the K types' per-group scales).
template <int N, bool kSigned>
HWY_INLINE void ScaleBytes(float d, const uint8_t* p, float* out) {
  const hn::CappedTag<float, N> df;
  const hn::RebindToSigned<decltype(df)> di;
  for (int i = 0; i < N; i += static_cast<int>(hn::Lanes(df))) {
    hn::Vec<decltype(di)> v;
    if constexpr (kSigned) {
      v = hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, decltype(di)>(),
                                      reinterpret_cast<const int8_t*>(p + i)));
    } else {
      v = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<decltype(di)>(),
                                        hn::LoadU(hn::Rebind<uint8_t, decltype(di)>(), p + i)));
    }
    hn::StoreU(hn::Mul(hn::Set(df, d), hn::ConvertTo(df, v)), df, out + i);
  }
}

// 4-bit quants through a 16-entry table of their dequantized values (one
// vpermps per 16 weights instead of convert + multiply; the table holds the
// same float products). Needs 16 float lanes (AVX-512); other targets compute.
constexpr bool kLut4 = kN == 16;
HWY_INLINE V Iota16() { return ToF(hn::Iota(DI(), 0)); }
HWY_INLINE void Lookup4(V table, hn::Vec<DI> q, float* HWY_RESTRICT y) {
  hn::Store(hn::TableLookupLanes(table, hn::IndicesFromVec(DF(), q)), DF(), y);
}

// One block dequantized exactly as dequantize_row() (quant_blocks.cc): the
// same float expressions, vectorised. w = a * q - b uses MulSub: a * q is
// exact in float32 (an fp16 scale times a small integer), so the fused form
// rounds once, as the separate one does.
template <QuantType t>
HWY_INLINE void DequantBlock(const uint8_t* b, float* HWY_RESTRICT y) {
  const DF df;
  const DI di;
  switch (t) {
    case QuantType::Q8_0: {
      const V d = hn::Set(df, quant::load_fp16(b));
      for (int64_t e = 0; e < 32; e += kN) hn::Store(hn::Mul(ToF(LoadI8(b + 2 + e)), d), df, y + e);
      return;
    }
    case QuantType::Q4_0: {
      const V d = hn::Set(df, quant::load_fp16(b));
      if constexpr (kLut4) {
        const V table = hn::Mul(d, ToF(hn::Sub(hn::Iota(di, 0), hn::Set(di, 8))));
        for (int64_t e = 0; e < 32; e += kN) Lookup4(table, Nibbles(b + 2, e), y + e);
        return;
      }
      for (int64_t e = 0; e < 32; e += kN) {
        hn::Store(hn::Mul(d, ToF(hn::Sub(Nibbles(b + 2, e), hn::Set(di, 8)))), df, y + e);
      }
      return;
    }
    case QuantType::Q4_1: {
      const V d = hn::Set(df, quant::load_fp16(b)), m = hn::Set(df, quant::load_fp16(b + 2));
      if constexpr (kLut4) {
        const V table = hn::MulAdd(d, Iota16(), m);
        for (int64_t e = 0; e < 32; e += kN) Lookup4(table, Nibbles(b + 4, e), y + e);
        return;
      }
      for (int64_t e = 0; e < 32; e += kN)
        hn::Store(hn::MulAdd(d, ToF(Nibbles(b + 4, e)), m), df, y + e);
      return;
    }
    case QuantType::Q4_K:
    case QuantType::Q5_K: {
      const bool five = t == QuantType::Q5_K;
      const K4Scales k4 = UnpackK4(b + 4);
      alignas(32) float dl[8], ml[8];
      ScaleBytes<8, false>(quant::load_fp16(b), k4.sc, dl);
      ScaleBytes<8, false>(quant::load_fp16(b + 2), k4.m, ml);
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        const V dj = hn::Set(df, dl[j]), mj = hn::Set(df, ml[j]);
        if (kLut4 && !five) {
          const V table = hn::MulSub(dj, Iota16(), mj);
          for (int64_t e = 0; e < 32; e += kN) {
            const auto v = LoadU8(qs + (j / 2) * 32 + e);
            Lookup4(table, (j % 2) ? hn::ShiftRight<4>(v) : hn::And(v, hn::Set(di, 0xF)),
                    y + j * 32 + e);
          }
          continue;
        }
        for (int64_t e = 0; e < 32; e += kN) {
          auto q = LoadU8(qs + (j / 2) * 32 + e);
          q = (j % 2) ? hn::ShiftRight<4>(q) : hn::And(q, hn::Set(di, 0xF));
          if (five) {
            const auto h = hn::And(hn::ShiftRightSame(LoadU8(b + 16 + e), j), hn::Set(di, 1));
            q = hn::Or(q, hn::ShiftLeft<4>(h));
          }
          hn::Store(hn::MulSub(dj, ToF(q), mj), df, y + j * 32 + e);
        }
      }
      return;
    }
    case QuantType::Q6_K: {
      alignas(64) float dls[16];
      ScaleBytes<16, true>(quant::load_fp16(b + 208), b + 192, dls);
      for (int64_t g = 0; g < 16; ++g) {
        const V dl = hn::Set(df, dls[g]);
        for (int64_t e = g * 16; e < g * 16 + 16; e += kN) {
          const int64_t half = e / 128, r = e % 128;
          const auto low = hn::And(hn::ShiftRightSame(LoadU8(b + half * 64 + r % 64), 4 * (r / 64)),
                                   hn::Set(di, 0xF));
          const auto high =
              hn::And(hn::ShiftRightSame(LoadU8(b + 128 + half * 32 + r % 32), 2 * (r / 32)),
                      hn::Set(di, 3));
          const auto q = hn::Sub(hn::Or(low, hn::ShiftLeft<4>(high)), hn::Set(di, 32));
          hn::Store(hn::Mul(dl, ToF(q)), df, y + e);
        }
      }
      return;
    }
    case QuantType::Q4_G:
    case QuantType::Q8_G: {
      float sv;
      std::memcpy(&sv, b, 4);
      const V s = hn::Set(df, sv);
      const auto zero = hn::Set(di, static_cast<int8_t>(b[4]));
      if (kLut4 && t == QuantType::Q4_G) {
        const V table = hn::Mul(s, ToF(hn::Sub(hn::Iota(di, 0), zero)));
        for (int64_t e = 0; e < 32; e += kN) Lookup4(table, Nibbles(b + 8, e), y + e);
        return;
      }
      for (int64_t e = 0; e < 32; e += kN) {
        const auto q = t == QuantType::Q4_G ? Nibbles(b + 8, e) : LoadI8(b + 8 + e);
        hn::Store(hn::Mul(s, ToF(hn::Sub(q, zero))), df, y + e);
      }
      return;
    }
    case QuantType::Q5_0:
    case QuantType::Q5_1: {
      const bool one = t == QuantType::Q5_1;
      const uint8_t* qh = b + (one ? 4 : 2);  // bit l: element l's bit 4; qs follows
      if constexpr (kN >= 8) {                // mask bits start at a byte boundary
        const V d = hn::Set(df, quant::load_fp16(b));
        const V m = hn::Set(df, one ? quant::load_fp16(b + 2) : 0.0f);
        for (int64_t e = 0; e < 32; e += kN) {
          const auto h = hn::IfThenElseZero(hn::LoadMaskBits(di, qh + e / 8), hn::Set(di, 16));
          const auto q = hn::Or(Nibbles(qh + 4, e), h);
          // Q5_1: d * q is exact, so MulAdd rounds once as d * q + m does.
          hn::Store(one ? hn::MulAdd(d, ToF(q), m) : hn::Mul(d, ToF(hn::Sub(q, hn::Set(di, 16)))),
                    df, y + e);
        }
        return;
      }
      dequantize_row(t, b, y, 32);
      return;
    }
    default:  // Q2_K, Q3_K: the scalar decoding
      dequantize_row(t, b, y, quant_traits(t).block_elems);
      return;
  }
}

// quant::kNR weight rows [n, n + quant::kNR) over columns [k0, k0 + kc) into wbuf (row
// stride kc); rows past n_end are zero (their outputs are not stored).
// Block sizes as compile-time constants (quant_type.cc's table, for the
// per-type kernels: a run-time divisor in the block loop cost ~15%).
constexpr int64_t BlockElems(QuantType t) {
  switch (t) {
    case QuantType::Q2_K:
    case QuantType::Q3_K:
    case QuantType::Q4_K:
    case QuantType::Q5_K:
    case QuantType::Q6_K:
      return 256;
    default:
      return 32;
  }
}
constexpr int64_t BlockBytes(QuantType t) {
  switch (t) {
    case QuantType::Q4_0:
      return 18;
    case QuantType::Q4_1:
      return 20;
    case QuantType::Q5_0:
      return 22;
    case QuantType::Q5_1:
      return 24;
    case QuantType::Q8_0:
      return 34;
    case QuantType::Q2_K:
      return 84;
    case QuantType::Q3_K:
      return 110;
    case QuantType::Q4_K:
      return 144;
    case QuantType::Q5_K:
      return 176;
    case QuantType::Q6_K:
      return 210;
    case QuantType::Q4_G:
      return 24;
    case QuantType::Q8_G:
      return 40;
  }
  return 0;
}
struct ConstTraits {
  int64_t block_elems, block_bytes;
};
template <QuantType t>
constexpr ConstTraits kTraitsOf{BlockElems(t), BlockBytes(t)};

template <QuantType t>
HWY_NOINLINE void DequantRowsT(const QuantMatrix& w, int64_t n, int64_t n_end, int64_t k0,
                               int64_t kc, float* HWY_RESTRICT wbuf) {
  constexpr ConstTraits tr = kTraitsOf<t>;
  for (int64_t j = 0; j < quant::kNR; ++j) {
    float* out = wbuf + j * kc;
    if (n + j >= n_end) {
      std::fill(out, out + kc, 0.0f);
      continue;
    }
    const uint8_t* row = w.row(n + j) + k0 / tr.block_elems * tr.block_bytes;
    // The rows are quant::kNR interleaved streams read in short runs: the hardware
    // prefetcher alone left decode latency-bound (~2.5 GB/s on one core).
    const int64_t bytes = kc / tr.block_elems * tr.block_bytes;
    for (int64_t p = 0; p < bytes; p += 64) hwy::Prefetch(row + bytes + p);
    for (int64_t b = 0; b < kc / tr.block_elems; ++b) {
      DequantBlock<t>(row + b * tr.block_bytes, out + b * tr.block_elems);
    }
  }
}

void DequantRows(const QuantMatrix& w, int64_t n, int64_t n_end, int64_t k0, int64_t kc,
                 float* HWY_RESTRICT wbuf) {
  switch (w.type) {
#define HUBZOO_QUANT_CASE(T) \
  case QuantType::T:         \
    return DequantRowsT<QuantType::T>(w, n, n_end, k0, kc, wbuf);
    HUBZOO_QUANT_CASE(Q4_0)
    HUBZOO_QUANT_CASE(Q4_1)
    HUBZOO_QUANT_CASE(Q5_0)
    HUBZOO_QUANT_CASE(Q5_1)
    HUBZOO_QUANT_CASE(Q8_0)
    HUBZOO_QUANT_CASE(Q2_K)
    HUBZOO_QUANT_CASE(Q3_K)
    HUBZOO_QUANT_CASE(Q4_K)
    HUBZOO_QUANT_CASE(Q5_K)
    HUBZOO_QUANT_CASE(Q6_K)
    HUBZOO_QUANT_CASE(Q4_G)
    HUBZOO_QUANT_CASE(Q8_G)
#undef HUBZOO_QUANT_CASE
  }
}

// ---- int8 decoding: quant::decode_int8_wide, vectorised for the common
// types (16 int16 lanes at a time; CappedTag keeps AVX-512 at 256 bits).
using D16 = hn::CappedTag<int16_t, 16>;
HWY_INLINE hn::Vec<D16> Bytes16(const uint8_t* p) {
  return hn::BitCast(
      D16(), hn::PromoteTo(hn::Rebind<uint16_t, D16>(), hn::LoadU(hn::Rebind<uint8_t, D16>(), p)));
}
HWY_INLINE hn::Vec<D16> Low4(hn::Vec<D16> v) { return hn::And(v, hn::Set(D16(), 0xF)); }
HWY_INLINE void Put16(hn::Vec<D16> v, int16_t* p) { hn::StoreU(v, D16(), p); }

// One block into w16/mn16 (a and c through the pointers); false: not vectorised here.
template <QuantType t>
HWY_INLINE bool DecodeInt8Fast(const uint8_t* b, int16_t* w16, int16_t* mn16, float* a, float* c) {
  const D16 d;
  switch (t) {
    case QuantType::Q8_0:
      *a = quant::load_fp16(b), *c = 0.0f;
      for (int e = 0; e < 32; e += 16) {
        Put16(hn::PromoteTo(d, hn::LoadU(hn::Rebind<int8_t, D16>(),
                                         reinterpret_cast<const int8_t*>(b + 2 + e))),
              w16 + e);
      }
      return true;
    case QuantType::Q4_0:
    case QuantType::Q4_1: {
      const bool one = t == QuantType::Q4_1;
      *a = quant::load_fp16(b), *c = one ? quant::load_fp16(b + 2) : 0.0f;
      const auto v = Bytes16(b + (one ? 4 : 2));
      const auto bias = hn::Set(d, one ? 0 : 8);
      Put16(hn::Sub(Low4(v), bias), w16);
      Put16(hn::Sub(hn::ShiftRight<4>(v), bias), w16 + 16);
      if (one) Put16(hn::Set(d, 1), mn16), Put16(hn::Set(d, 1), mn16 + 16);
      return true;
    }
    case QuantType::Q5_0:
    case QuantType::Q5_1: {
      const bool one = t == QuantType::Q5_1;
      *a = quant::load_fp16(b), *c = one ? quant::load_fp16(b + 2) : 0.0f;
      const uint8_t* qh = b + (one ? 4 : 2);  // bit l: element l's bit 4; qs follows
      const auto v = Bytes16(qh + 4);
      const auto bias = hn::Set(d, one ? 0 : 16);
      for (int e = 0; e < 32; e += 16) {
        const auto h = hn::IfThenElseZero(hn::LoadMaskBits(d, qh + e / 8), hn::Set(d, 16));
        Put16(hn::Sub(hn::Or(e ? hn::ShiftRight<4>(v) : Low4(v), h), bias), w16 + e);
        if (one) Put16(hn::Set(d, 1), mn16 + e);
      }
      return true;
    }
    case QuantType::Q4_K:
    case QuantType::Q5_K: {
      const bool five = t == QuantType::Q5_K;
      *a = quant::load_fp16(b), *c = -quant::load_fp16(b + 2);
      const K4Scales k4 = UnpackK4(b + 4);
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        const int sc = k4.sc[j], m = k4.m[j];
        for (int e = 0; e < 32; e += 16) {
          const auto v = Bytes16(qs + (j / 2) * 32 + e);
          auto q = (j % 2) ? hn::ShiftRight<4>(v) : Low4(v);
          if (five) {
            const auto h = hn::And(hn::ShiftRightSame(Bytes16(b + 16 + e), j), hn::Set(d, 1));
            q = hn::Or(q, hn::ShiftLeft<4>(h));
          }
          Put16(hn::Mul(q, hn::Set(d, static_cast<int16_t>(sc))), w16 + j * 32 + e);
          Put16(hn::Set(d, static_cast<int16_t>(m)), mn16 + j * 32 + e);
        }
      }
      return true;
    }
    case QuantType::Q6_K:
      *a = quant::load_fp16(b + 208), *c = 0.0f;
      for (int g = 0; g < 16; ++g) {
        const int e = g * 16, half = e / 128, r = e % 128;
        const auto low = Low4(hn::ShiftRightSame(Bytes16(b + half * 64 + r % 64), 4 * (r / 64)));
        const auto high = hn::And(
            hn::ShiftRightSame(Bytes16(b + 128 + half * 32 + r % 32), 2 * (r / 32)), hn::Set(d, 3));
        const auto q = hn::Sub(hn::Or(low, hn::ShiftLeft<4>(high)), hn::Set(d, 32));
        Put16(hn::Mul(q, hn::Set(d, static_cast<int16_t>(static_cast<int8_t>(b[192 + g])))),
              w16 + e);
      }
      return true;
    case QuantType::Q4_G:
    case QuantType::Q8_G: {
      std::memcpy(a, b, 4);
      *c = 0.0f;
      const auto zero = hn::Set(d, static_cast<int16_t>(static_cast<int8_t>(b[4])));
      if (t == QuantType::Q4_G) {
        const auto v = Bytes16(b + 8);
        Put16(hn::Sub(Low4(v), zero), w16);
        Put16(hn::Sub(hn::ShiftRight<4>(v), zero), w16 + 16);
      } else {
        for (int e = 0; e < 32; e += 16) {
          const auto q = hn::PromoteTo(
              d, hn::LoadU(hn::Rebind<int8_t, D16>(), reinterpret_cast<const int8_t*>(b + 8 + e)));
          Put16(hn::Sub(q, zero), w16 + e);
        }
      }
      return true;
    }
    default:
      return false;
  }
}

// quant::kNR weight rows from n over [k0, k0 + kc) in the int8 form (rows past
// n_end are zeros).
template <QuantType t>
HWY_NOINLINE void DecodeRowsInt8T(const QuantMatrix& w, int64_t n, int64_t n_end, int64_t k0,
                                  int64_t kc, quant::Int8Weights& out) {
  constexpr ConstTraits tr = kTraitsOf<t>;
  const int64_t nb = kc / tr.block_elems;
  const bool has_min = quant::int8_has_min(t);
  out.w16.resize(quant::kNR * kc);
  out.mn16.resize(has_min ? quant::kNR * kc : 0);
  out.a.resize(quant::kNR * nb);
  out.c.resize(quant::kNR * nb);
  for (int64_t j = 0; j < quant::kNR; ++j) {
    if (n + j >= n_end) {
      std::fill(out.w16.begin() + j * kc, out.w16.begin() + (j + 1) * kc, 0);
      std::fill(out.a.begin() + j * nb, out.a.begin() + (j + 1) * nb, 0.0f);
      std::fill(out.c.begin() + j * nb, out.c.begin() + (j + 1) * nb, 0.0f);
      continue;
    }
    const uint8_t* row = w.row(n + j) + k0 / tr.block_elems * tr.block_bytes;
    const int64_t bytes = nb * tr.block_bytes;
    for (int64_t p = 0; p < bytes; p += 64) hwy::Prefetch(row + bytes + p);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = j * kc + b * tr.block_elems;
      int16_t* mn = has_min ? out.mn16.data() + at : nullptr;
      float* a = out.a.data() + j * nb + b;
      float* c = out.c.data() + j * nb + b;
      if (!DecodeInt8Fast<t>(row + b * tr.block_bytes, out.w16.data() + at, mn, a, c)) {
        quant::decode_int8_wide(t, row + b * tr.block_bytes, {out.w16.data() + at, mn, a, c});
      }
    }
  }
}

void DecodeRowsInt8(const QuantMatrix& w, int64_t n, int64_t n_end, int64_t k0, int64_t kc,
                    quant::Int8Weights& out) {
  switch (w.type) {
#define HUBZOO_QUANT_CASE(T) \
  case QuantType::T:         \
    return DecodeRowsInt8T<QuantType::T>(w, n, n_end, k0, kc, out);
    HUBZOO_QUANT_CASE(Q4_0)
    HUBZOO_QUANT_CASE(Q4_1)
    HUBZOO_QUANT_CASE(Q5_0)
    HUBZOO_QUANT_CASE(Q5_1)
    HUBZOO_QUANT_CASE(Q8_0)
    HUBZOO_QUANT_CASE(Q2_K)
    HUBZOO_QUANT_CASE(Q3_K)
    HUBZOO_QUANT_CASE(Q4_K)
    HUBZOO_QUANT_CASE(Q5_K)
    HUBZOO_QUANT_CASE(Q6_K)
    HUBZOO_QUANT_CASE(Q4_G)
    HUBZOO_QUANT_CASE(Q8_G)
#undef HUBZOO_QUANT_CASE
  }
}

#endif  // HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

}  // namespace HWY_NAMESPACE
}  // namespace hubzoo
HWY_AFTER_NAMESPACE();

#endif  // include guard
