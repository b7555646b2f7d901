// Quantized linears of the Hub's formats -> Q4_G / Q8_G QuantMatrix.
//
// Each format is first unpacked into one common form (integers q [n, k] in
// the original column order, scale and zero [n, groups], the group of each
// column), then written as blocks; columns are permuted so that every
// 32-column block lies in one group (GPTQ desc_act) and k_perm records it.
#include "layers/hub_quant.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/error.h"
#include "layers/hub_quant_spec.h"

namespace hubzoo {
namespace {

constexpr int64_t kBlock = 32;
constexpr int64_t kMaxDim = int64_t{1} << 30;  // n, k (k_perm holds int32)

// One matrix's integers and scales, original column order.
struct Unpacked {
  QuantType type = QuantType::Q4_G;  // Q4_G: q and zero in 0..15; Q8_G: int8
  int64_t n = 0, k = 0, groups = 0;
  std::vector<int8_t> q;       // [n, k]
  std::vector<float> scale;    // [n, groups]
  std::vector<int8_t> zero;    // [n, groups]
  std::vector<int32_t> group;  // [k]: the group of each column

  void allocate(QuantType t, int64_t rows, int64_t cols, int64_t g) {
    type = t, n = rows, k = cols, groups = g;
    q.assign(static_cast<size_t>(n * k), 0);
    scale.assign(static_cast<size_t>(n * g), 0.0f);
    zero.assign(static_cast<size_t>(n * g), 0);
    group.assign(static_cast<size_t>(k), 0);
  }
};

// The tensors of one linear: presence, dtype and shape checked, names noted.
class Tensors {
 public:
  Tensors(const Checkpoint& ckpt, std::string prefix, std::vector<std::string>* used)
      : ckpt_(ckpt), prefix_(std::move(prefix)), used_(used) {}

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& suffix) const { return ckpt_.contains(name(suffix)); }
  std::string name(const std::string& suffix) const { return prefix_ + "." + suffix; }

  // `suffix` with one of `dtypes` and exactly `shape`.
  TensorView get(const std::string& suffix, const std::vector<DType>& dtypes,
                 const Shape& shape) const {
    const std::string full = name(suffix);
    if (!ckpt_.contains(full)) {
      throw TensorMappingError("quantized linear '" + prefix_ + "': missing tensor '" + full + "'");
    }
    const TensorInfo& info = ckpt_.info(full);
    const bool dtype_ok = std::find(dtypes.begin(), dtypes.end(), info.dtype) != dtypes.end();
    if (!dtype_ok || info.shape != shape) {
      std::string want;
      for (DType d : dtypes) want += (want.empty() ? "" : "/") + std::string(dtype_name(d));
      throw TensorMappingError(ckpt_.file_of(full).string() + ": tensor '" + full + "' must be " +
                               want + " " + shape_str(shape) + ", got " +
                               std::string(dtype_name(info.dtype)) + " " + shape_str(info.shape));
    }
    if (used_) used_->push_back(full);
    return ckpt_.view(full);
  }

  [[noreturn]] void bad(const std::string& suffix, const std::string& why) const {
    const std::string full = name(suffix);
    const std::string where =
        ckpt_.contains(full) ? ckpt_.file_of(full).string() : "quantized linear '" + prefix_ + "'";
    throw TensorMappingError(where + ": tensor '" + full + "' " + why);
  }

  const TensorInfo& info(const std::string& suffix) const {
    if (!has(suffix)) {
      throw TensorMappingError("quantized linear '" + prefix_ + "': missing tensor '" +
                               name(suffix) + "'");
    }
    return ckpt_.info(name(suffix));
  }

 private:
  const Checkpoint& ckpt_;
  std::string prefix_;
  std::vector<std::string>* used_;
};

const std::vector<DType> kFloatTypes = {DType::F32, DType::F16, DType::BF16};

// Mapped data may be unaligned: words and integers are read with memcpy.
uint32_t word(const TensorView& v, int64_t i) {
  uint32_t w;
  std::memcpy(&w, static_cast<const uint8_t*>(v.data) + i * 4, 4);
  return w;
}

int64_t integer(const TensorView& v, int64_t i) {
  const auto* p =
      static_cast<const uint8_t*>(v.data) + i * static_cast<int64_t>(dtype_size(v.dtype));
  switch (v.dtype) {
    case DType::I8:
      return static_cast<int8_t>(*p);
    case DType::I16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case DType::I32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DType::I64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return x;
    }
    default:
      throw InvalidArgument("integer(): not an integer dtype");
  }
}

std::vector<float> floats(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  convert_to_f32(v.dtype, v.data, out.data(), out.size());
  return out;
}

void check_dims(const std::string& prefix, int64_t n, int64_t k) {
  if (n <= 0 || k <= 0 || n > kMaxDim || k > kMaxDim || k % kBlock != 0) {
    throw TensorMappingError("quantized linear '" + prefix + "': shape [" + std::to_string(n) +
                             ", " + std::to_string(k) +
                             "] is not supported (in_features must be a positive multiple of "
                             "32, hubzoo's quantized block)");
  }
}

// Columns grouped by g_idx (or i / group_size): values checked in [0, groups).
void read_groups(const Tensors& t, const TensorView* g_idx, int64_t group_size, Unpacked& u) {
  for (int64_t c = 0; c < u.k; ++c) {
    const int64_t g = g_idx ? integer(*g_idx, c) : c / group_size;
    if (g < 0 || g >= u.groups) {
      t.bad("g_idx", "holds group " + std::to_string(g) + " at column " + std::to_string(c) +
                         ", outside [0, " + std::to_string(u.groups) + ")");
    }
    u.group[static_cast<size_t>(c)] = static_cast<int32_t>(g);
  }
}

// GPTQ: qweight [k/8, n] int32 (8 rows of k per word, row i at bits 4i),
// qzeros [groups, n/8] int32 (column j at bits 4 (j % 8)), scales [groups, n],
// g_idx [k]. v1 ("gptq") stores zero - 1 per 4-bit field.
Unpacked unpack_gptq(const HubQuantSpec& s, const Tensors& t, int64_t n, int64_t k) {
  if (n % 8 != 0) t.bad("qzeros", "cannot pack " + std::to_string(n) + " columns 8 to a word");
  const int64_t gs = s.group_size < 0 ? k : s.group_size;
  const int64_t groups = (k + gs - 1) / gs;
  const TensorView qw = t.get("qweight", {DType::I32}, {k / 8, n});
  const TensorView qz = t.get("qzeros", {DType::I32}, {groups, n / 8});
  const std::vector<float> sc = floats(t.get("scales", kFloatTypes, {groups, n}));
  std::optional<TensorView> g_idx;
  if (t.has("g_idx")) {
    g_idx = t.get("g_idx", {DType::I32, DType::I64}, {k});
  } else if (s.desc_act) {
    t.bad("g_idx", "is missing (desc_act true needs it)");
  }
  Unpacked u;
  u.allocate(QuantType::Q4_G, n, k, groups);
  read_groups(t, g_idx ? &*g_idx : nullptr, gs, u);
  // Words in storage order: a word row cw fills bytes 8cw..8cw+7 of every
  // row of q, so consecutive word rows keep reusing the same cache lines.
  for (int64_t cw = 0; cw < k / 8; ++cw) {
    for (int64_t r = 0; r < n; ++r) {
      const uint32_t w = word(qw, cw * n + r);
      for (int i = 0; i < 8; ++i)
        u.q[r * k + cw * 8 + i] = static_cast<int8_t>((w >> (4 * i)) & 15u);
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      uint32_t z = (word(qz, g * (n / 8) + r / 8) >> (4 * (r % 8))) & 15u;
      if (s.gptq_v1_zeros) z = (z + 1) & 15u;
      u.zero[r * groups + g] = static_cast<int8_t>(z);
      u.scale[r * groups + g] = sc[g * n + r];
    }
  }
  return u;
}

// AWQ GEMM: qweight [k, n/8] int32 whose word j holds columns 8j + {0,2,4,6,
// 1,3,5,7} at bits 0, 4, ..., 28 (column 8j + m at bits 4 kAwqShift[m]);
// qzeros [k/G, n/8] the same way; scales [k/G, n]. No zero offset.
Unpacked unpack_awq(const HubQuantSpec& s, const Tensors& t, int64_t n, int64_t k) {
  static constexpr int kAwqShift[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  if (n % 8 != 0) t.bad("qweight", "cannot pack " + std::to_string(n) + " columns 8 to a word");
  if (k % s.group_size != 0) {
    t.bad("scales", "groups of " + std::to_string(s.group_size) + " do not divide in_features " +
                        std::to_string(k));
  }
  const int64_t groups = k / s.group_size;
  const TensorView qw = t.get("qweight", {DType::I32}, {k, n / 8});
  const TensorView qz = t.get("qzeros", {DType::I32}, {groups, n / 8});
  const std::vector<float> sc = floats(t.get("scales", kFloatTypes, {groups, n}));
  Unpacked u;
  u.allocate(QuantType::Q4_G, n, k, groups);
  read_groups(t, nullptr, s.group_size, u);
  for (int64_t c = 0; c < k; ++c) {  // words in storage order, as in unpack_gptq
    for (int64_t j = 0; j < n / 8; ++j) {
      const uint32_t w = word(qw, c * (n / 8) + j);
      for (int m = 0; m < 8; ++m) {
        u.q[(j * 8 + m) * k + c] = static_cast<int8_t>((w >> (4 * kAwqShift[m])) & 15u);
      }
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    const int shift = 4 * kAwqShift[r % 8];
    for (int64_t g = 0; g < groups; ++g) {
      u.zero[r * groups + g] = static_cast<int8_t>((word(qz, g * (n / 8) + r / 8) >> shift) & 15u);
      u.scale[r * groups + g] = sc[g * n + r];
    }
  }
  return u;
}

// compressed-tensors' scale shape for a strategy: [n, k / group_size],
// [n, 1] (channel) or [1] (tensor); groups of columns accordingly.
struct CtGroups {
  Shape scale_shape;
  int64_t groups = 1;
  int64_t group_size = 0;
};

CtGroups ct_groups(const CtScheme& c, const Tensors& t, int64_t n, int64_t k) {
  if (c.strategy == CtStrategy::kGroup) {
    if (k % c.group_size != 0) {
      t.bad("weight_scale", "groups of " + std::to_string(c.group_size) +
                                " do not divide in_features " + std::to_string(k));
    }
    return {{n, k / c.group_size}, k / c.group_size, c.group_size};
  }
  if (c.strategy == CtStrategy::kChannel) return {{n, 1}, 1, k};
  return {{1}, 1, k};
}

// Q4_G holds q and zero offset by 8 (0..15); Q8_G as stored.
int8_t ct_value(const CtScheme& c, const Tensors& t, const std::string& suffix, int64_t v) {
  if (c.bits == 4) {
    if (v < -8 || v > 7) t.bad(suffix, "holds " + std::to_string(v) + ", outside int4's -8..7");
    return static_cast<int8_t>(v + 8);
  }
  if (v < -128 || v > 127) t.bad(suffix, "holds " + std::to_string(v) + ", outside int8");
  return static_cast<int8_t>(v);
}

// Scales (broadcast over rows for the tensor strategy) and zero points.
void ct_scales(const CtScheme& c, const Tensors& t, const CtGroups& cg, bool packed_zero,
               Unpacked& u) {
  const std::vector<float> sc = floats(t.get("weight_scale", kFloatTypes, cg.scale_shape));
  const bool per_row = c.strategy != CtStrategy::kTensor;
  std::optional<TensorView> zp;
  const int64_t per = 32 / c.bits;
  if (!c.symmetric) {
    zp = packed_zero ? t.get("weight_zero_point", {DType::I32}, {(u.n + per - 1) / per, u.groups})
                     : t.get("weight_zero_point", {DType::I8, DType::I16, DType::I32, DType::I64},
                             cg.scale_shape);
  }
  const uint32_t mask = (1u << c.bits) - 1;
  const int64_t offset = int64_t{1} << (c.bits - 1);
  for (int64_t r = 0; r < u.n; ++r) {
    for (int64_t g = 0; g < u.groups; ++g) {
      const int64_t i = per_row ? r * u.groups + g : 0;
      u.scale[r * u.groups + g] = sc[static_cast<size_t>(i)];
      int64_t z = 0;
      if (zp && packed_zero) {  // packed along rows: [ceil(n / per), groups]
        z = static_cast<int64_t>((word(*zp, (r / per) * u.groups + g) >> (c.bits * (r % per))) &
                                 mask) -
            offset;
      } else if (zp) {
        z = integer(*zp, i);
      }
      u.zero[r * u.groups + g] = ct_value(c, t, "weight_zero_point", z);
    }
  }
}

// pack-quantized: weight_packed [n, k / (32 / bits)] int32, value i of a row
// at bits (i % per) * bits of word i / per, stored as q + 2^(bits-1);
// weight_shape [2] = (n, k); zero points packed the same way along rows.
Unpacked unpack_ct_packed(const CtScheme& c, const Tensors& t, int64_t n, int64_t k) {
  const int64_t per = 32 / c.bits;
  const TensorView shape = t.get("weight_shape", {DType::I64, DType::I32}, {2});
  if (integer(shape, 0) != n || integer(shape, 1) != k) {
    t.bad("weight_shape", "holds [" + std::to_string(integer(shape, 0)) + ", " +
                              std::to_string(integer(shape, 1)) + "], expected [" +
                              std::to_string(n) + ", " + std::to_string(k) + "]");
  }
  const TensorView packed = t.get("weight_packed", {DType::I32}, {n, k / per});
  const CtGroups cg = ct_groups(c, t, n, k);
  Unpacked u;
  u.allocate(c.bits == 4 ? QuantType::Q4_G : QuantType::Q8_G, n, k, cg.groups);
  read_groups(t, nullptr, cg.group_size, u);
  const uint32_t mask = (1u << c.bits) - 1;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const uint32_t v = (word(packed, r * (k / per) + i / per) >> (c.bits * (i % per))) & mask;
      // Q4_G keeps the stored nibble (q + 8); Q8_G the signed value.
      u.q[r * k + i] =
          static_cast<int8_t>(c.bits == 4 ? static_cast<int>(v) : static_cast<int>(v) - 128);
    }
  }
  ct_scales(c, t, cg, /*packed_zero=*/true, u);
  return u;
}

// int-quantized / naive-quantized: weight [n, k] int8 holding q itself.
Unpacked unpack_ct_int(const CtScheme& c, const Tensors& t, int64_t n, int64_t k) {
  const TensorView w = t.get("weight", {DType::I8}, {n, k});
  const CtGroups cg = ct_groups(c, t, n, k);
  Unpacked u;
  u.allocate(c.bits == 4 ? QuantType::Q4_G : QuantType::Q8_G, n, k, cg.groups);
  read_groups(t, nullptr, cg.group_size, u);
  const auto* q = static_cast<const int8_t*>(w.data);
  for (int64_t i = 0; i < n * k; ++i) u.q[i] = ct_value(c, t, "weight", q[i]);
  ct_scales(c, t, cg, /*packed_zero=*/false, u);
  return u;
}

// The stored column order: columns stably sorted by group, so each 32-column
// block lies in one group. Empty when that is the identity.
std::vector<int32_t> column_order(const Tensors& t, const Unpacked& u) {
  std::vector<int32_t> perm;
  if (!std::is_sorted(u.group.begin(), u.group.end())) {
    perm.resize(static_cast<size_t>(u.k));
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int32_t a, int32_t b) { return u.group[a] < u.group[b]; });
  }
  for (int64_t b = 0; b < u.k / kBlock; ++b) {
    const auto col = [&](int64_t j) { return perm.empty() ? j : perm[static_cast<size_t>(j)]; };
    const int32_t g = u.group[col(b * kBlock)];
    for (int64_t j = b * kBlock + 1; j < (b + 1) * kBlock; ++j) {
      if (u.group[col(j)] != g) {
        t.bad(t.has("g_idx") ? "g_idx" : "scales",
              "puts a group boundary inside 32-column block " + std::to_string(b) +
                  " (every group must hold a multiple of 32 columns)");
      }
    }
  }
  return perm;
}

void put_f32(uint8_t* p, float f) { std::memcpy(p, &f, 4); }

QuantMatrix to_blocks(const Tensors& t, const Unpacked& u) {
  std::vector<int32_t> perm = column_order(t, u);
  const int64_t row_bytes = quant_row_bytes(u.type, u.k);
  auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(u.n * row_bytes), 0);
  const auto col = [&](int64_t j) { return perm.empty() ? j : perm[static_cast<size_t>(j)]; };
  const int64_t bb = quant_traits(u.type).block_bytes;
  for (int64_t r = 0; r < u.n; ++r) {
    const int8_t* q = u.q.data() + r * u.k;
    for (int64_t b = 0; b < u.k / kBlock; ++b) {
      uint8_t* blk = bytes->data() + r * row_bytes + b * bb;
      const int64_t g = u.group[col(b * kBlock)];
      put_f32(blk, u.scale[r * u.groups + g]);
      blk[4] = static_cast<uint8_t>(u.zero[r * u.groups + g]);
      uint8_t* qs = blk + 8;
      for (int64_t j = 0; j < kBlock; ++j) {
        const auto v = static_cast<uint8_t>(q[col(b * kBlock + j)]);
        if (u.type == QuantType::Q8_G) {
          qs[j] = v;
        } else if (j < 16) {
          qs[j] = static_cast<uint8_t>(v & 15u);
        } else {
          qs[j - 16] = static_cast<uint8_t>(qs[j - 16] | (v << 4));
        }
      }
    }
  }
  QuantMatrix m;
  m.type = u.type;
  m.n = u.n;
  m.k = u.k;
  m.row_bytes = row_bytes;
  m.data = bytes->data();
  m.keep = bytes;
  m.k_perm = std::move(perm);
  return m;
}

}  // namespace

bool HubQuant::is_quantized(const Checkpoint& ckpt, const std::string& prefix) const {
  if (spec_->method != HubQuantMethod::kCompressedTensors) {
    return ckpt.contains(prefix + ".qweight");
  }
  // The tensors decide, as the package's compressor did: a target ("Linear",
  // a pattern) may also match modules it never compresses (an embedding the
  // loader packs for a tied lm_head), and those keep a float `weight`.
  const bool stored =
      ckpt.contains(prefix + ".weight_packed") || ckpt.contains(prefix + ".weight_scale");
  if (spec_->ct_scheme_for(prefix)) return stored;
  for (const char* s : {".weight_packed", ".weight_scale", ".weight_zero_point"}) {
    if (ckpt.contains(prefix + s)) {
      throw TensorMappingError(ckpt.file_of(prefix + s).string() + ": tensor '" + prefix + s +
                               "' belongs to a module " + spec_->where +
                               " leaves unquantized (targets/ignore)");
    }
  }
  return false;
}

QuantMatrix HubQuant::take(const Checkpoint& ckpt, const std::string& prefix, int64_t n, int64_t k,
                           std::vector<std::string>* used) const {
  check_dims(prefix, n, k);
  const Tensors t(ckpt, prefix, used);
  const HubQuantSpec& s = *spec_;
  Unpacked u;
  if (s.method == HubQuantMethod::kGptq) {
    u = unpack_gptq(s, t, n, k);
  } else if (s.method == HubQuantMethod::kAwq) {
    u = unpack_awq(s, t, n, k);
  } else {
    const CtScheme* c = s.ct_scheme_for(prefix);
    if (!c) {
      throw TensorMappingError("linear '" + prefix + "' is not quantized by " + s.where +
                               " (targets/ignore)");
    }
    u = c->format == CtFormat::kPackQuantized ? unpack_ct_packed(*c, t, n, k)
                                              : unpack_ct_int(*c, t, n, k);
  }
  return to_blocks(t, u);
}

std::vector<int64_t> HubQuant::stored_shape(const Checkpoint& ckpt,
                                            const std::string& prefix) const {
  const Tensors t(ckpt, prefix, nullptr);
  const HubQuantSpec& s = *spec_;
  if (s.method == HubQuantMethod::kGptq) {
    const Shape& qw = t.info("qweight").shape;
    if (qw.size() != 2) t.bad("qweight", "must be 2-D, got " + shape_str(qw));
    return {qw[1], qw[0] * 8};
  }
  if (s.method == HubQuantMethod::kAwq) {
    const Shape& qw = t.info("qweight").shape;
    const Shape& sc = t.info("scales").shape;
    if (qw.size() != 2 || sc.size() != 2) t.bad("scales", "qweight and scales must be 2-D");
    return {sc[1], qw[0]};
  }
  const CtScheme* c = s.ct_scheme_for(prefix);
  if (c && c->format == CtFormat::kPackQuantized) {
    const TensorView v = t.get("weight_shape", {DType::I64, DType::I32}, {2});
    return {integer(v, 0), integer(v, 1)};
  }
  const Shape& w = t.info("weight").shape;
  if (w.size() != 2) t.bad("weight", "must be 2-D, got " + shape_str(w));
  return w;
}

}  // namespace hubzoo
