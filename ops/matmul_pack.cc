// Packing weights into matmul.h's column panels (float32, bf16, fp16 or
// quantized parts), reading them back, and stacking packed matrices.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/mman.h>

#include "base/error.h"
#include "ops/bf16.h"
#include "ops/matmul.h"
#include "ops/panel_memory.h"
#include "tensor/dtype.h"

namespace hubzoo {
namespace {

void free_aligned(float* p) { std::free(p); }
void free_aligned16(uint16_t* p) { std::free(p); }

// Panels of `panels` x k x kPanel elements (alloc_panel_memory); only the
// last panel (whose rows past n are padding) is zeroed, the packing writes
// the rest.
template <typename T>
T* alloc_panels(int64_t panels, int64_t k) {
  const int64_t elements = panels * k * kPanel;
  const int64_t last = panels > 0 ? (panels - 1) * k * kPanel : 0;
  return static_cast<T*>(alloc_panel_memory(
      static_cast<size_t>(std::max<int64_t>(elements, 32)) * sizeof(T), last * sizeof(T)));
}

// Row-major W [n, k] into rows [row0, row0 + n) of the panels (`stride`
// elements apart; kTiles: the tile layout of PackedMatrix::bf16_tiles), each
// element through `convert`, a 32-row x 64-k block at a time (both sides in L1) instead of one row
// at a time with 128-byte strided writes.
template <bool kTiles, typename S, typename T, typename Convert>
void pack_rows(const S* w, int64_t n, int64_t k, T* data, int64_t stride, int64_t row0,
               Convert convert) {
  constexpr int64_t kKStep = 64;
  for (int64_t r0 = 0; r0 < n;) {
    const int64_t global = row0 + r0;  // first row in the destination
    const int64_t rows = std::min(kPanel - global % kPanel, n - r0);
    T* panel = data + (global / kPanel) * stride + global % kPanel * (kTiles ? 2 : 1);
    for (int64_t c0 = 0; c0 < k; c0 += kKStep) {
      const int64_t c1 = std::min(k, c0 + kKStep);
      for (int64_t r = 0; r < rows; ++r) {
        const S* src = w + (r0 + r) * k;
        T* dst = panel + r * (kTiles ? 2 : 1);
        for (int64_t c = c0; c < c1; ++c) {
          dst[kTiles ? c / 2 * 2 * kPanel + c % 2 : c * kPanel] = convert(src[c]);
        }
      }
    }
    r0 += rows;
  }
}

// pack_rows on up to 4 threads for matrices of 1+ MiB, split at panel
// boundaries: the kernel zeroes the fresh pages a thread first writes, so the
// page clearing (most of a cold load) runs in parallel with the copying.
// SmolLM2-135M fp32 load: 0.41-0.53 s on one thread -> see bench/README.md.
template <bool kTiles = false, typename S, typename T, typename Convert>
void pack_into(const S* w, int64_t n, int64_t k, T* data, int64_t stride, int64_t row0,
               Convert convert) {
  const int64_t bytes = n * k * static_cast<int64_t>(sizeof(T));
  const int64_t threads = bytes < (4 << 20)
                              ? 1
                              : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1,
                                                    std::min<int64_t>(4, n / kPanel));
  if (threads <= 1) {
    pack_rows<kTiles>(w, n, k, data, stride, row0, convert);
    return;
  }
  // Split points: rows whose global index starts a panel.
  std::vector<int64_t> cut = {0};
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t global = (row0 + n * t / threads + kPanel - 1) / kPanel * kPanel;
    cut.push_back(std::clamp<int64_t>(global - row0, cut.back(), n));
  }
  cut.push_back(n);
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < threads; ++t) {
    helpers.emplace_back([=] {
      pack_rows<kTiles>(w + cut[t] * k, cut[t + 1] - cut[t], k, data, stride, row0 + cut[t],
                        convert);
    });
  }
  pack_rows<kTiles>(w, cut[1], k, data, stride, row0, convert);
  for (auto& h : helpers) h.join();
}

// The quantized part holding `row`, and the row's index inside it.
std::pair<const QuantMatrix*, int64_t> quant_part(const PackedMatrix& p, int64_t row) {
  for (const auto& part : p.quant) {
    if (row < part->n) return {part.get(), row};
    row -= part->n;
  }
  throw InvalidArgument("PackedMatrix: row " + std::to_string(row) + " out of range");
}

// A 16-bit panel element of `p` as the float it stands for (exact).
float half_value(const PackedMatrix& p, uint16_t v) {
  return p.f16 ? f16_to_f32(v) : bf16_to_float(v);
}

}  // namespace

int64_t PackedMatrix::bytes() const {
  if (is_quantized()) {
    int64_t total = 0;
    for (const auto& part : quant) total += part->bytes();
    return total;
  }
  if (is_coded()) return coded->bytes(num_panels());
  return num_panels() * panel_elements() * (is_half() ? 2 : 4);
}

float PackedMatrix::at(int64_t row, int64_t col) const {
  if (is_quantized()) {
    std::vector<float> values(static_cast<size_t>(k));
    copy_row(row, values.data());
    return values[col];
  }
  if (is_coded()) return bf16_to_float(coded_at(*this, row, col));
  if (bf16_tiles) {
    return bf16_to_float(half[(row / kPanel) * panel_elements() + (col / 2) * 2 * kPanel +
                              (row % kPanel) * 2 + col % 2]);
  }
  const int64_t i = ((row / kPanel) * k + col) * kPanel + row % kPanel;
  return is_half() ? half_value(*this, half[i]) : data[i];
}

void PackedMatrix::copy_row(int64_t row, float* out) const {
  if (is_quantized()) {
    const auto [part, r] = quant_part(*this, row);
    part->dequantize_row(r, out);
    return;
  }
  if (is_coded()) {
    std::vector<uint16_t> bits(static_cast<size_t>(k));
    coded_row(*this, row, bits.data());
    for (int64_t c = 0; c < k; ++c) out[c] = bf16_to_float(bits[c]);
    return;
  }
  if (bf16_tiles) {
    const uint16_t* column = half.get() + (row / kPanel) * panel_elements() + (row % kPanel) * 2;
    for (int64_t c = 0; c < k; ++c) out[c] = bf16_to_float(column[(c / 2) * 2 * kPanel + c % 2]);
    return;
  }
  const int64_t first = (row / kPanel) * k * kPanel + row % kPanel;
  if (is_half()) {
    for (int64_t c = 0; c < k; ++c) out[c] = half_value(*this, half[first + c * kPanel]);
  } else {
    for (int64_t c = 0; c < k; ++c) out[c] = data[first + c * kPanel];
  }
}

PackedMatrix pack_weights(const float* w, int64_t n, int64_t k) {
  if (n < 0 || k < 0) throw InvalidArgument("pack_weights: negative shape");
  PackedMatrix p;
  p.n = n;
  p.k = k;
  p.data = {alloc_panels<float>(p.num_panels(), k), &free_aligned};
  pack_into(w, n, k, p.data.get(), p.panel_elements(), 0, [](float v) { return v; });
  return p;
}

PackedMatrix pack_weights_bf16(const float* w, int64_t n, int64_t k) {
  if (n < 0 || k < 0) throw InvalidArgument("pack_weights_bf16: negative shape");
  PackedMatrix p;
  p.n = n;
  p.k = k;
  p.half = {alloc_panels<uint16_t>(p.num_panels(), k), &free_aligned16};
  pack_into(w, n, k, p.half.get(), p.panel_elements(), 0, [](float v) { return bf16_bits(v); });
  return p;
}

PackedMatrix pack_quantized(std::vector<std::shared_ptr<const QuantMatrix>> parts, QuantMode mode) {
  if (parts.empty()) throw InvalidArgument("pack_quantized: no parts");
  PackedMatrix p;
  p.k = parts[0]->k;
  for (const auto& part : parts) {
    if (!part || part->k != p.k) throw InvalidArgument("pack_quantized: parts differ in k");
    if (!part->k_perm.empty() && part->k_perm != parts[0]->k_perm)
      throw InvalidArgument("pack_quantized: parts differ in their input permutation");
    p.n += part->n;
  }
  p.quant = std::move(parts);
  p.quant_mode = mode;
  return p;
}

PackedMatrix pack_weights_concat(const std::vector<WeightRows>& parts, int64_t k, PanelType type,
                                 bool tiles) {
  if (k < 0) throw InvalidArgument("pack_weights_concat: negative shape");
  if (tiles && type != PanelType::kBF16)
    throw InvalidArgument("pack_weights_concat: the tile layout is bf16");
  PackedMatrix p;
  p.k = k;
  p.bf16_activations = p.bf16_tiles = tiles;
  p.f16 = type == PanelType::kF16;
  for (const WeightRows& part : parts) {
    if (part.rows < 0) throw InvalidArgument("pack_weights_concat: negative shape");
    if (part.bf16_bits && part.f16_bits)
      throw InvalidArgument("pack_weights_concat: a part stored as both bf16 and fp16");
    p.n += part.rows;
  }
  const int64_t stride = p.panel_elements();
  if (type == PanelType::kF32) {
    p.data = {alloc_panels<float>(p.num_panels(), k), &free_aligned};
  } else {
    p.half = {alloc_panels<uint16_t>(p.num_panels(), stride / kPanel), &free_aligned16};
    // Tiles past K: alloc_panels zeroes only the last panel.
    if (tiles && p.tile_k() != k) {
      std::memset(p.half.get(), 0, static_cast<size_t>(p.num_panels() * stride) * 2);
    }
  }
  // Each stored element to the panels' type: copied where it is stored so,
  // widened exactly to float32, or rounded to nearest even to bf16 / fp16.
  const auto same = [](uint16_t v) { return v; };
  const auto from_bf16 = [](uint16_t v) { return bf16_to_float(v); };
  const auto from_f16 = [](uint16_t v) { return f16_to_f32(v); };
  const auto f16_to_bf16 = [](uint16_t v) { return bf16_bits(f16_to_f32(v)); };
  const auto bf16_to_f16 = [](uint16_t v) { return f32_to_f16(bf16_to_float(v)); };
  const auto to_f32 = [](float v) { return v; };
  const auto to_bf16 = [](float v) { return bf16_bits(v); };
  const auto to_f16 = [](float v) { return f32_to_f16(v); };
  int64_t row0 = 0;
  for (const WeightRows& part : parts) {
    const auto into = [&](const auto* src, auto* dst, auto convert) {
      if (tiles) {
        pack_into<true>(src, part.rows, k, dst, stride, row0, convert);
      } else {
        pack_into(src, part.rows, k, dst, stride, row0, convert);
      }
    };
    switch (type) {
      case PanelType::kF32:
        if (part.bf16_bits) {
          into(part.bf16_bits, p.data.get(), from_bf16);
        } else if (part.f16_bits) {
          into(part.f16_bits, p.data.get(), from_f16);
        } else {
          into(part.w, p.data.get(), to_f32);
        }
        break;
      case PanelType::kBF16:
        if (part.bf16_bits) {
          into(part.bf16_bits, p.half.get(), same);
        } else if (part.f16_bits) {
          into(part.f16_bits, p.half.get(), f16_to_bf16);
        } else {
          into(part.w, p.half.get(), to_bf16);
        }
        break;
      case PanelType::kF16:
        if (part.f16_bits) {
          into(part.f16_bits, p.half.get(), same);
        } else if (part.bf16_bits) {
          into(part.bf16_bits, p.half.get(), bf16_to_f16);
        } else {
          into(part.w, p.half.get(), to_f16);
        }
        break;
    }
    row0 += part.rows;
  }
  return p;
}

PackedMatrix to_bf16_tiles(PackedMatrix p) {
  if (p.is_coded()) p = from_bf16_coded(p);
  if (!p.is_bf16() || !p.bf16_activations) {
    throw InvalidArgument("to_bf16_tiles: the tile chain needs bf16 weights and bf16 activations");
  }
  if (p.bf16_tiles) return p;
  PackedMatrix t;
  t.n = p.n;
  t.k = p.k;
  t.bf16_activations = true;
  t.bf16_tiles = true;
  const int64_t panels = p.num_panels(), k = p.k, pairs = t.tile_k() / 2;
  t.half = {alloc_panels<uint16_t>(panels, t.tile_k()), &free_aligned16};
  // Each panel's rows k and k + 1 interleaved, as 32-bit words (low half k).
  for (int64_t panel = 0; panel < panels; ++panel) {
    const uint16_t* src = p.half.get() + panel * k * kPanel;
    uint32_t* dst = reinterpret_cast<uint32_t*>(t.half.get() + panel * t.panel_elements());
    for (int64_t q = 0; q < pairs; ++q) {
      const int64_t k0 = 2 * q;
      for (int64_t c = 0; c < kPanel; ++c) {
        const uint32_t lo = k0 < k ? src[k0 * kPanel + c] : 0u;
        const uint32_t hi = k0 + 1 < k ? src[(k0 + 1) * kPanel + c] : 0u;
        dst[q * kPanel + c] = lo | hi << 16;
      }
    }
  }
  return t;
}

PackedMatrix concat_packed(const std::vector<const PackedMatrix*>& parts) {
  if (parts.empty()) throw InvalidArgument("concat_packed: no parts");
  if (parts[0]->is_quantized()) {
    std::vector<std::shared_ptr<const QuantMatrix>> all;
    for (const PackedMatrix* part : parts) {
      if (!part->is_quantized() || part->quant_mode != parts[0]->quant_mode)
        throw InvalidArgument("concat_packed: quantized and unquantized parts, or two modes");
      all.insert(all.end(), part->quant.begin(), part->quant.end());
    }
    return pack_quantized(std::move(all), parts[0]->quant_mode);
  }
  if (std::any_of(parts.begin(), parts.end(),
                  [](const PackedMatrix* m) { return m->is_coded(); })) {
    // Coded parts (ops/matmul_coded.h) stacked as plain bf16 panels, coded again.
    std::vector<PackedMatrix> plain;
    std::vector<const PackedMatrix*> ptrs;
    plain.reserve(parts.size());
    for (const PackedMatrix* part : parts) {
      if (part->is_coded()) plain.push_back(from_bf16_coded(*part));
      ptrs.push_back(part->is_coded() ? &plain.back() : part);
    }
    return to_bf16_coded(concat_packed(ptrs));
  }
  const int64_t k = parts[0]->k;
  // The parts' panel type where every part has it; parts of different types
  // (a checkpoint storing float32 beside bf16 or fp16 matrices, under float32
  // numerics) stack as float32, the 16-bit ones widened exactly.
  const auto type_of = [](const PackedMatrix& m) {
    return m.is_f16() ? PanelType::kF16 : m.is_bf16() ? PanelType::kBF16 : PanelType::kF32;
  };
  PanelType type = type_of(*parts[0]);
  bool aligned = true;  // every part but the last fills whole panels
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]->k != k || parts[i]->is_quantized()) {
      throw InvalidArgument("concat_packed: parts differ in k or dtype");
    }
    if (parts[i]->bf16_activations != parts[0]->bf16_activations ||
        parts[i]->bf16_tiles != parts[0]->bf16_tiles) {
      throw InvalidArgument("concat_packed: parts differ in bf16_activations or layout");
    }
    if (type_of(*parts[i]) != type_of(*parts[0])) {
      if (parts[0]->bf16_activations) throw InvalidArgument("concat_packed: parts differ in dtype");
      type = PanelType::kF32;
      aligned = false;  // repacked as float32
    }
    if (i + 1 < parts.size() && parts[i]->n % kPanel != 0) aligned = false;
  }
  const bool bf16_activations = parts[0]->bf16_activations;
  if (!aligned) {  // unpack and pack again (exact: 16-bit values widen and round back to
                   // themselves)
    std::vector<std::vector<float>> rows(parts.size());
    std::vector<WeightRows> src;
    for (size_t i = 0; i < parts.size(); ++i) {
      rows[i].resize(static_cast<size_t>(parts[i]->n * k));
      for (int64_t r = 0; r < parts[i]->n; ++r) parts[i]->copy_row(r, &rows[i][r * k]);
      src.push_back({rows[i].data(), parts[i]->n});
    }
    PackedMatrix packed = pack_weights_concat(src, k, type, parts[0]->bf16_tiles);
    packed.bf16_activations = bf16_activations;
    return packed;
  }
  // Panels are independent blocks: the concatenation's panels are the parts'
  // panels one after the other (the last part's padding included).
  PackedMatrix p;
  p.k = k;
  p.bf16_activations = bf16_activations;
  p.bf16_tiles = parts[0]->bf16_tiles;
  p.f16 = type == PanelType::kF16;
  for (const PackedMatrix* part : parts) p.n += part->n;
  const bool half = type != PanelType::kF32;
  if (half) {
    p.half = {alloc_panels<uint16_t>(p.num_panels(), p.panel_elements() / kPanel), &free_aligned16};
  } else {
    p.data = {alloc_panels<float>(p.num_panels(), k), &free_aligned};
  }
  char* dst = half ? reinterpret_cast<char*>(p.half.get()) : reinterpret_cast<char*>(p.data.get());
  for (const PackedMatrix* part : parts) {
    const char* src = half ? reinterpret_cast<const char*>(part->half.get())
                           : reinterpret_cast<const char*>(part->data.get());
    std::memcpy(dst, src, part->bytes());
    dst += part->bytes();
  }
  return p;
}

// Huge pages only for the largest matrices (the embedding / lm_head): asking
// for them on every 4+ MiB matrix (fp32 fused gate/up) made loads slower and
// erratic (0.47-0.80 s vs 0.46-0.50 s, SmolLM2 fp32), the kernel compacting
// memory to find them; on those, loading faulted a page per 2 MiB instead of
// per 4 KiB (a fifth of the fp32 load time of SmolLM2-135M went to page
// faults). Only the whole 2 MiB pages of the buffer are advised: rounding the
// size up to 2 MiB cost up to ~1 MiB per matrix (fp32 SmolLM2's fused gate/up,
// 7.1 MiB each: +28 MiB RSS).
void* alloc_panel_memory(size_t bytes, size_t zero_from) {
  bytes = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
  constexpr size_t kHuge = 2 << 20;
  const bool huge = bytes >= 8 * kHuge;
  void* mem = nullptr;
  if (posix_memalign(&mem, huge ? kHuge : 64, bytes) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (huge) madvise(mem, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // advice: failure is harmless
#endif
  if (zero_from < bytes) std::memset(static_cast<char*>(mem) + zero_from, 0, bytes - zero_from);
  return mem;
}

}  // namespace hubzoo
