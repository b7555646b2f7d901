#include "layers/weights.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace hubzoo {
namespace {

// Panels of floats rounded to bf16 (bf16 numerics) or kept float32.
PanelType panels_of(bool bf16) { return bf16 ? PanelType::kBF16 : PanelType::kF32; }

// A matrix stored as bf16 or fp16 whose values are stored ones (no offset
// added; GGUF's q/k rows may be permuted): packed from its bits.
bool stored_half(const TensorInfo& info) {
  return !info.quant && info.add == 0.0f && (info.dtype == DType::BF16 || info.dtype == DType::F16);
}

// The panels a stored_half matrix packs into: bf16 stays bf16 under any
// numerics (it multiplies as its exact float32 widening), fp16 stays fp16
// under float32 numerics; bf16 numerics round fp16 to bf16.
PanelType half_panels(const TensorInfo& info, bool bf16) {
  return info.dtype == DType::BF16 || bf16 ? PanelType::kBF16 : PanelType::kF16;
}

// Its rows in the model's order: the mapped bits, or a copy in `reordered`.
const uint16_t* half_rows(const TensorInfo& info, const TensorView& v, int64_t k,
                          std::vector<uint16_t>& reordered) {
  const auto* stored = static_cast<const uint16_t*>(v.data);
  if (info.row_order.empty()) return stored;
  reordered.resize(info.row_order.size() * static_cast<size_t>(k));
  for (size_t r = 0; r < info.row_order.size(); ++r) {
    std::memcpy(reordered.data() + r * k, stored + info.row_order[r] * k,
                static_cast<size_t>(k) * sizeof(uint16_t));
  }
  return reordered.data();
}

// Rows of bf16 or fp16 bits as a part of a packed matrix.
WeightRows half_part(DType dtype, const uint16_t* bits, int64_t rows) {
  return dtype == DType::BF16 ? WeightRows{.rows = rows, .bf16_bits = bits}
                              : WeightRows{.rows = rows, .f16_bits = bits};
}

}  // namespace

WeightLoader::WeightLoader(std::shared_ptr<const Checkpoint> checkpoint, Numerics numerics)
    : ckpt_(std::move(checkpoint)), numerics_(numerics) {
  const std::vector<std::string> names = ckpt_->names();
  for (const auto& name : names) used_[name] = false;
  if (numerics_.quant_mix != QuantMix::kNone) mix_model_ = quant_mix_model(names);
}

bool WeightLoader::contains(const std::string& name) const { return used_.count(name) != 0; }

bool WeightLoader::quantized(const std::string& name) const {
  if (numerics_.dequantize) return false;
  return hub_quantized(name) || (contains(name) && (ckpt_->info(name).quant || numerics_.quantize));
}

bool WeightLoader::hub_quantized(const std::string& name) const {
  const std::string suffix = ".weight";
  if (!hub_ || name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  return hub_->is_quantized(*ckpt_, name.substr(0, name.size() - suffix.size()));
}

std::shared_ptr<QuantMatrix> WeightLoader::take_hub_matrix(const std::string& name, int64_t n,
                                                           int64_t k) {
  const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
  std::vector<std::string> used;
  auto q = std::make_shared<QuantMatrix>(hub_->take(*ckpt_, prefix, n, k, &used));
  for (const std::string& t : used) {
    auto it = used_.find(t);
    if (it == used_.end()) throw TensorMappingError("checkpoint is missing tensor '" + t + "'");
    if (it->second) throw TensorMappingError("tensor '" + t + "' is used twice");
    it->second = true;
  }
  return q;
}

PackedMatrix WeightLoader::take_hub_quantized(const std::string& name, int64_t n, int64_t k,
                                              bool bf16) {
  if (!numerics_.dequantize) {
    std::shared_ptr<QuantMatrix> q = take_hub_matrix(name, n, k);
    if (makes_panels(q->type)) {
      // The converted rows go to the quantize-on-load cache, keyed by their
      // own bytes (the conversion is quick; the cache is there so that the
      // rows are a file's pages, dropped as the panels are made, rather than
      // anonymous memory resident beside them: twice the weights).
      std::optional<QuantCacheEntry> cached;
      if (quant_cache_.enabled()) {
        const QuantCacheSource source{
            q->data, static_cast<uint64_t>(q->bytes()), DType::F32, q->type, nullptr, 0.0f};
        const QuantCacheKey key = quant_cache_key(kQuantizerRevision, q->type, n, k, source);
        cached = quant_cache_.find(key, {q->type, n, k, q->row_bytes});
        if (cached) {  // the same bytes (the key covers them)
          ++cache_hits_;
          q->data = cached->rows.get();
          q->keep = cached->rows;
        } else {
          cached = store_rows(*q, key);
        }
      }
      attach_loader_panels(*q, cached);
    }
    return pack_quant({std::move(q)});
  }
  std::vector<float> w(static_cast<size_t>(n * k));
  take_hub_matrix(name, n, k)->dequantize(w.data());
  return pack_weights_concat({{w.data(), n}}, k, panels_of(bf16), bf16 && tiles_wanted());
}

const TensorInfo& WeightLoader::claim(const std::string& name, const Shape& shape) {
  auto it = used_.find(name);
  if (it == used_.end()) {
    throw TensorMappingError("checkpoint is missing tensor '" + name + "' (expected shape " +
                             shape_str(shape) + ")");
  }
  if (it->second) throw TensorMappingError("tensor '" + name + "' is used twice");
  const TensorInfo& info = ckpt_->info(name);
  const std::string file = ckpt_->file_of(name).string();
  if (info.shape != shape) {
    throw TensorMappingError(file + ": tensor '" + name + "' has shape " + shape_str(info.shape) +
                             ", the config implies " + shape_str(shape));
  }
  if (!info.quant && !is_float_weight_dtype(info.dtype)) {
    throw TensorMappingError(file + ": tensor '" + name + "' has dtype " +
                             std::string(dtype_name(info.dtype)) +
                             "; weights must be F32, BF16 or F16");
  }
  it->second = true;
  return info;
}

FloatWeights WeightLoader::take(const std::string& name, const Shape& shape) {
  const TensorInfo& info = claim(name, shape);
  FloatWeights w;
  w.size_ = num_elements(info.shape);
  if (info.dtype == DType::F32 && !numerics_.bf16 && !transformed(info)) {
    w.data_ = static_cast<const float*>(ckpt_->view(name).data);
  } else {
    w.owned_ = read_f32(name, info);
    numerics_.round_stored(w.owned_.data(), w.size_);
    w.data_ = w.owned_.data();
  }
  bytes_ += w.size_ * static_cast<int64_t>(sizeof(float));
  return w;
}

bool WeightLoader::transformed(const TensorInfo& info) {
  return !info.row_order.empty() || info.add != 0.0f;
}

std::vector<float> WeightLoader::read_f32(const std::string& name, const TensorInfo& info) const {
  const int64_t rows = info.shape.empty() ? 1 : info.shape[0];
  const int64_t numel = num_elements(info.shape);
  std::vector<float> out(static_cast<size_t>(numel));
  read_f32_rows(name, info, 0, rows, out.data());
  return out;
}

void WeightLoader::read_f32_rows(const std::string& name, const TensorInfo& info, int64_t r0,
                                 int64_t r1, float* out) const {
  const TensorView v = ckpt_->view(name);
  const int64_t rows = info.shape.empty() ? 1 : info.shape[0];
  const int64_t cols = rows > 0 ? num_elements(info.shape) / rows : 0;
  const auto* base = static_cast<const uint8_t*>(v.data);
  // A quantized tensor (a small one, a norm, or an explicit fallback): dequantized rows.
  const int64_t row_bytes = info.quant ? quant_row_bytes(*info.quant, cols)
                                       : cols * static_cast<int64_t>(dtype_size(info.dtype));
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t stored = info.row_order.empty() ? r : info.row_order[r];
    float* row = out + (r - r0) * cols;
    if (info.quant) {
      dequantize_row(*info.quant, base + stored * row_bytes, row, cols);
    } else {
      convert_to_f32(info.dtype, base + stored * row_bytes, row, static_cast<size_t>(cols));
    }
    if (info.add != 0.0f) {
      for (int64_t c = 0; c < cols; ++c) row[c] += info.add;
    }
  }
}

// A quantized checkpoint tensor as a QuantMatrix: a view of the mapped blocks
// (kept alive by the checkpoint), in a row order where it has panels, or else
// a copy with its rows reordered.
std::shared_ptr<const QuantMatrix> WeightLoader::quant_view(const std::string& name,
                                                            const TensorInfo& info, int64_t n,
                                                            int64_t k, int64_t first_row) const {
  auto q = std::make_shared<QuantMatrix>();
  q->type = *info.quant;
  q->n = n;
  q->k = k;
  q->row_bytes = quant_row_bytes(q->type, k);
  q->data = static_cast<const uint8_t*>(ckpt_->view(name).data) + first_row * q->row_bytes;
  q->keep = ckpt_;
  // The int8 kernels read panels where quant_reads_panels says (ops/quant.h): made here,
  // once, the mapped rows' pages dropped as they are read. A tied
  // embedding's lookups read the panels too; only a path that reads rows
  // (another SIMD target in a test, the reference) faults them back in.
  const bool panels = makes_panels(q->type);
  if (info.row_order.empty()) {
    if (panels) {
      const uint64_t base = static_cast<uint64_t>(first_row * q->row_bytes);
      uint64_t done = base;
      attach_panels(
          *q,
          [&](int64_t rows) {
            const uint64_t to = base + static_cast<uint64_t>(rows * q->row_bytes);
            ckpt_->release(name, done, to);
            done = to;
          },
          &arena_);
      ++panels_;
    }
    return q;
  }
  if (first_row != 0 || n != static_cast<int64_t>(info.row_order.size()))
    throw TensorMappingError("tensor '" + name + "': a row order on a stacked tensor");
  if (panels && n <= INT32_MAX) {
    // Reordered rows (llama.cpp's q/k) as a row order over the mapped view:
    // the panels hold them in that order, and no reordered copy is made. The
    // rows are read out of order, so their pages go once all are read.
    q->row_order.assign(info.row_order.begin(), info.row_order.end());
    attach_panels(*q, nullptr, &arena_);
    ckpt_->release(name);
    ++panels_;
    return q;
  }
  auto permuted = std::make_shared<QuantMatrix>(permute_rows(*q, info.row_order));
  ckpt_->release(name);  // the reordered copy is the only one read
  return permuted;
}

PackedMatrix WeightLoader::pack_quant(std::vector<std::shared_ptr<const QuantMatrix>> parts) const {
  ++quantized_;
  return pack_quantized(std::move(parts), numerics_.int8 ? QuantMode::kInt8 : QuantMode::kExact);
}

PackedMatrix WeightLoader::quantize(const std::string& name, int64_t n, int64_t k,
                                    const QuantCacheSource& source, const RowReader& read) const {
  const std::optional<QuantType> t = quant_mix_type(numerics_, mix_model_, {name, k});
  if (!t) {
    // Rows that fit no block type stay as they are (llama-quantize writes F16 there).
    std::vector<float> w(static_cast<size_t>(n * k));
    read(0, n, w.data());
    return numerics_.bf16 ? pack_weights_bf16(w.data(), n, k) : pack_weights(w.data(), n, k);
  }
  if (!can_quantize(*t)) {
    throw InvalidArgument("quantize: hubzoo has no quantizer for " + std::string(quant_name(*t)));
  }
  // The rows come from the quantize-on-load cache where it holds them (the
  // stored weights then never even become floats), else from the quantizer,
  // and then go into the cache: either way they are a file's pages, which (as
  // quant_view does with a GGUF's) are dropped as the panels are made and read
  // back should anything else need them. Without a cache the owned rows stay
  // resident beside the panels: the exact kernels and other SIMD targets read them.
  const QuantCacheShape shape{*t, n, k, quant_row_bytes(*t, k)};
  QuantCacheKey key;
  std::optional<QuantCacheEntry> cached;
  if (quant_cache_.enabled()) {
    key = quant_cache_key(kQuantizerRevision, *t, n, k, source);
    cached = quant_cache_.find(key, shape);
    cache_hits_ += cached ? 1 : 0;
  }
  auto q = std::make_shared<QuantMatrix>();
  if (cached) {
    q->type = *t;
    q->n = n;
    q->k = k;
    q->row_bytes = shape.row_bytes;
    q->data = cached->rows.get();
    q->keep = cached->rows;
  } else {
    *q = quantize_matrix_chunked(*t, n, k, read, *ThreadPool::shared(0));
    if (quant_cache_.enabled()) cached = store_rows(*q, key);
  }
  attach_loader_panels(*q, cached);
  return pack_quant({std::move(q)});
}

std::optional<QuantCacheEntry> WeightLoader::store_rows(QuantMatrix& q,
                                                        const QuantCacheKey& key) const {
  std::optional<QuantCacheEntry> cached =
      quant_cache_.store(key, {q.type, q.n, q.k, q.row_bytes}, q.data);
  if (cached) {  // the same bytes, now a file's pages
    ++cache_stores_;
    q.data = cached->rows.get();
    q.keep = cached->rows;
  }
  return cached;
}

bool WeightLoader::makes_panels(QuantType t) const {
  return numerics_.int8 && panels_allowed_ && quant_reads_panels(t);
}

void WeightLoader::attach_loader_panels(QuantMatrix& q,
                                        const std::optional<QuantCacheEntry>& cached) const {
  if (!makes_panels(q.type)) return;
  uint64_t done = 0;
  attach_panels(
      q,
      [&](int64_t rows) {
        if (!cached) return;
        const uint64_t to = static_cast<uint64_t>(rows * q.row_bytes);
        cached->release(done, to);
        done = to;
      },
      &arena_);
  ++panels_;
}

PackedMatrix WeightLoader::take_lookup_table(const std::string& name, int64_t n, int64_t k) {
  struct Restore {
    bool& flag;
    ~Restore() { flag = true; }
  } restore{panels_allowed_};
  panels_allowed_ = false;
  return take_packed(name, n, k);
}

PackedMatrix WeightLoader::take_packed(const std::string& name, int64_t n, int64_t k) {
  PackedMatrix p = mark_activations(take_packed_as(name, n, k, numerics_.bf16));
  bytes_ += p.bytes();
  return p;
}

bool WeightLoader::tiles_wanted() const {
  return numerics_.bf16_matmul_inputs() && matmul_bf16_tiles();
}

PackedMatrix WeightLoader::mark_activations(PackedMatrix p) const {
  p.bf16_activations = numerics_.bf16_matmul_inputs() && p.is_bf16();
  // On AMX-BF16, laid out for the tile chain (ops/matmul.h): every product of
  // the matrix, a decode step's included, then runs that one chain. The
  // loader's own packing writes that layout at once; others are converted.
  if (p.bf16_activations && tiles_wanted()) return to_bf16_tiles(std::move(p));
  // Elsewhere coded in 12 bits per weight (ops/matmul_coded.h), where a coded
  // kernel multiplies them: bf16 dot products, or the FMA kernel on AVX-512.
  if (p.is_bf16() && matmul_bf16_coded(p.bf16_activations)) return to_bf16_coded(std::move(p));
  return p;
}

PackedMatrix WeightLoader::take_packed_fp32(const std::string& name, int64_t n, int64_t k) {
  bf16_fp32_only_ = true;  // not quantized either: kept exactly as stored
  PackedMatrix p = take_packed_as(name, n, k, /*bf16=*/false);
  bf16_fp32_only_ = false;
  bytes_ += p.bytes();
  return p;
}

PackedMatrix WeightLoader::take_packed_as(const std::string& name, int64_t n, int64_t k,
                                          bool bf16) {
  if (hub_quantized(name)) return take_hub_quantized(name, n, k, bf16);
  const TensorInfo& info = claim(name, {n, k});
  if (info.quant && !numerics_.dequantize) return pack_quant({quant_view(name, info, n, k, 0)});
  if (numerics_.quantize && !bf16_fp32_only_) {
    const QuantCacheSource source{
        ckpt_->view(name).data,
        static_cast<uint64_t>(num_elements(info.shape)) * dtype_size(info.dtype),
        info.dtype,
        info.quant,
        &info.row_order,
        info.add};
    PackedMatrix q = quantize(name, n, k, source, [&](int64_t r0, int64_t r1, float* out) {
      read_f32_rows(name, info, r0, r1, out);
    });
    ckpt_->release(name);
    return q;
  }
  TensorView v = ckpt_->view(name);
  const bool tiles = bf16 && tiles_wanted();  // packed in the tile layout straight away
  const auto pack = [&](const float* w) {
    return pack_weights_concat({{w, n}}, k, panels_of(bf16), tiles);
  };
  PackedMatrix packed;
  if (stored_half(info)) {
    // A bf16 matrix is packed as the bf16 it is under any numerics: it
    // multiplies as its exact float32 widening, bit for bit (ops/matmul.h),
    // in half the bytes. So is an fp16 matrix under float32 numerics (GPTQ /
    // AWQ checkpoints' lm_head and embeddings, GGUF F16 files); bf16 numerics
    // round it to bf16.
    std::vector<uint16_t> reordered;
    packed = pack_weights_concat({half_part(info.dtype, half_rows(info, v, k, reordered), n)}, k,
                                 half_panels(info, bf16), tiles);
  } else if (transformed(info) || info.quant) {  // quantized: --quantize dequantize
    packed = pack(read_f32(name, info).data());
  } else if (info.dtype == DType::F32) {
    packed = pack(static_cast<const float*>(v.data));
  } else {
    std::vector<float> tmp(static_cast<size_t>(n * k));
    convert_to_f32(info.dtype, v.data, tmp.data(), tmp.size());
    packed = pack(tmp.data());
  }
  ckpt_->release(name);  // the packed copy is the only one kept resident
  return packed;
}

PackedMatrix WeightLoader::take_packed_concat(const std::vector<std::string>& names,
                                              const std::vector<int64_t>& ns, int64_t k) {
  if (names.size() != ns.size())
    throw InvalidArgument("take_packed_concat: names and sizes differ");
  bool any_quant = numerics_.quantize.has_value(), all_quant = true;
  for (size_t i = 0; i < names.size(); ++i) {
    const bool q =
        !numerics_.dequantize && (hub_quantized(names[i]) ||
                                  (contains(names[i]) && ckpt_->info(names[i]).quant.has_value()));
    any_quant = any_quant || q;
    all_quant = all_quant && q;
  }
  if (any_quant && (all_quant || numerics_.quantize)) {
    // Quantized parts stay as they are, side by side (their block types may differ).
    // The fused matrix counts once if any part is quantized (--quantize leaves
    // rows that fit no block type as floats).
    const int64_t quantized_before = quantized_;
    std::vector<PackedMatrix> parts;
    for (size_t i = 0; i < names.size(); ++i) parts.push_back(take_packed(names[i], ns[i], k));
    std::vector<const PackedMatrix*> ptrs;
    for (const PackedMatrix& p : parts) ptrs.push_back(&p);
    PackedMatrix fused = concat_packed(ptrs);
    quantized_ = quantized_before + (quantized_ > quantized_before ? 1 : 0);
    return fused;
  }
  std::vector<std::vector<float>> converted(names.size());
  std::vector<std::vector<uint16_t>> reordered(names.size());
  std::vector<WeightRows> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    if (hub_quantized(names[i])) {  // --quantize dequantize
      converted[i].resize(static_cast<size_t>(ns[i] * k));
      take_hub_matrix(names[i], ns[i], k)->dequantize(converted[i].data());
      parts.push_back({converted[i].data(), ns[i]});
      continue;
    }
    const TensorInfo& info = claim(names[i], {ns[i], k});
    TensorView v = ckpt_->view(names[i]);
    if (stored_half(info)) {
      parts.push_back(half_part(info.dtype, half_rows(info, v, k, reordered[i]), ns[i]));
    } else if (info.quant || transformed(info)) {
      // A file mixing float and block-quantized parts of one fused projection:
      // the quantized part is dequantized into the float matrix (exact values).
      converted[i] = read_f32(names[i], info);
      parts.push_back({converted[i].data(), ns[i]});
    } else if (info.dtype == DType::F32) {
      parts.push_back({static_cast<const float*>(v.data), ns[i]});
    } else {
      converted[i].resize(static_cast<size_t>(ns[i] * k));
      convert_to_f32(info.dtype, v.data, converted[i].data(), converted[i].size());
      parts.push_back({converted[i].data(), ns[i]});
    }
  }
  // Every part stored as bf16 (no part converted): packed as bf16 under any
  // numerics; every part fp16: as fp16 under float32 numerics.
  const auto all = [&](auto stored) { return std::all_of(parts.begin(), parts.end(), stored); };
  const bool all_bf16 = all([](const WeightRows& p) { return p.bf16_bits != nullptr; });
  const bool all_f16 = all([](const WeightRows& p) { return p.f16_bits != nullptr; });
  const PanelType type = numerics_.bf16 || all_bf16 ? PanelType::kBF16
                         : all_f16                  ? PanelType::kF16
                                                    : PanelType::kF32;
  PackedMatrix packed =
      mark_activations(pack_weights_concat(parts, k, type, numerics_.bf16 && tiles_wanted()));
  for (const auto& name : names) {  // the packed copy is the only one kept
    if (contains(name)) ckpt_->release(name);
  }
  bytes_ += packed.bytes();
  return packed;
}

std::vector<PackedMatrix> WeightLoader::take_packed_stack(const std::string& name, int64_t count,
                                                          int64_t n, int64_t k, int64_t parts) {
  if (parts <= 0 || n % parts != 0) {
    throw TensorMappingError("tensor '" + name + "': " + std::to_string(n) +
                             " rows do not split into " + std::to_string(parts) + " parts");
  }
  const TensorInfo& info = claim(name, {count, n, k});
  const int64_t rows = n / parts;
  if (info.quant && !numerics_.dequantize) {  // each matrix a view of its rows of the blocks
    std::vector<PackedMatrix> out;
    for (int64_t b = 0; b < count * parts; ++b) {
      out.push_back(pack_quant({quant_view(name, info, rows, k, b * rows)}));
      bytes_ += out.back().bytes();
    }
    return out;
  }
  if (transformed(info))
    throw TensorMappingError("tensor '" + name + "': a stacked tensor with a row order");
  TensorView v = ckpt_->view(name);
  const bool tiles = numerics_.bf16 && tiles_wanted();  // packed in the tile layout at once
  const size_t block = static_cast<size_t>(rows * k);
  // Floats of one matrix: --quantize reads rows in chunks; a quantized tensor
  // (--quantize dequantize) is read a whole stacked matrix (`parts` of them) at a time.
  std::vector<float> tmp(numerics_.quantize || stored_half(info) ? 0 : info.quant ? n * k : block);
  std::vector<PackedMatrix> out;
  out.reserve(count * parts);
  for (int64_t b = 0; b < count * parts; ++b) {
    const char* src = info.quant
                          ? nullptr
                          : static_cast<const char*>(v.data) + b * block * dtype_size(info.dtype);
    if (numerics_.quantize) {
      const QuantCacheSource source{src, block * dtype_size(info.dtype), info.dtype, {}, nullptr,
                                    0.0f};
      out.push_back(
          mark_activations(quantize(name, rows, k, source, [&](int64_t r0, int64_t r1, float* to) {
            convert_to_f32(info.dtype, src + r0 * k * dtype_size(info.dtype), to,
                           static_cast<size_t>((r1 - r0) * k));
          })));
    } else if (stored_half(info)) {  // packed from its bits, as take_packed does
      out.push_back(mark_activations(
          pack_weights_concat({half_part(info.dtype, reinterpret_cast<const uint16_t*>(src), rows)},
                              k, half_panels(info, numerics_.bf16), tiles)));
    } else {
      const float* w = tmp.data();
      if (info.quant) {
        if (b % parts == 0) read_f32_rows(name, info, b / parts, b / parts + 1, tmp.data());
        w += b % parts * block;
      } else {
        convert_to_f32(info.dtype, src, tmp.data(), block);
      }
      out.push_back(
          mark_activations(pack_weights_concat({{w, rows}}, k, panels_of(numerics_.bf16), tiles)));
    }
    bytes_ += out.back().bytes();
  }
  ckpt_->release(name);
  return out;
}

void WeightLoader::ignore(const std::string& name, const std::string& reason) {
  auto it = used_.find(name);
  if (it == used_.end()) return;
  it->second = true;
  ignored_[name] = reason;
}

void WeightLoader::finish() const {
  std::string unused;
  int count = 0;
  for (const auto& [name, used] : used_) {
    if (used) continue;
    if (count++ < 8)
      unused +=
          (unused.empty() ? "" : ", ") + ckpt_->file_of(name).filename().string() + ":" + name;
  }
  if (count > 0) {
    throw TensorMappingError("checkpoint has " + std::to_string(count) +
                             " tensor(s) the model does not use: " + unused +
                             (count > 8 ? ", ..." : ""));
  }
}

}  // namespace hubzoo
