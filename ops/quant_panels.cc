// The panel layouts (ops/quant.h): the rows' blocks interleaved 16 rows at a
// time, made once at load. The 32-weight types have their own (Q4_G and
// Q8_G one of their own, as their blocks differ from GGML's); the K types
// (Q2_K .. Q6_K) are copied part by part: fp16 fields as 16 halves, the
// rest as runs of dwords, dword w of a run one 64-byte vector of the 16 rows.
#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "base/error.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"

namespace hubzoo {
namespace {

constexpr int64_t kRows = quant::kPanelRows;
constexpr int64_t kReportPanels = 1024 / kRows;  // attach_panels' `read` every 1024 rows

// Where a GGML block keeps its parts: the fp16 scale d at 0, the fp16 min m
// (Q4_1 / Q5_1), the 32 high bits qh (Q5), and the codes qs. A panel block
// holds the 16 rows' d, then their m, then the qh bits as 64 bytes of bit
// planes, then the codes: panel_m(), panel_planes() and panel_codes() are
// where.
struct BlockParts {
  int64_t m = -1, qh = -1, qs = 2;
  static constexpr int64_t panel_m() { return 2 * kRows; }
  constexpr int64_t panel_planes() const { return panel_m() + (m >= 0 ? 2 * kRows : 0); }
  constexpr int64_t panel_codes() const { return panel_planes() + (qh >= 0 ? 64 : 0); }
};
constexpr BlockParts block_parts(QuantType t) {
  switch (t) {
    case QuantType::Q4_0:
      return {-1, -1, 2};
    case QuantType::Q4_1:
      return {2, -1, 4};
    case QuantType::Q5_0:
      return {-1, 2, 6};
    case QuantType::Q5_1:
      return {2, 4, 8};
    case QuantType::Q8_0:
      return {-1, -1, 2};
    default:
      throw InvalidArgument(std::string("panels: ") + std::string(quant_name(t)) +
                            " has no panel layout");
  }
}

// Row l of a panel, its nb blocks (`row`, or one zero block again and again
// for a row past the matrix: row_step 0), into its slots of the panel's nb
// panel blocks. A row at a time, not a block of all 16 rows at a time: the
// source is then read as one sequential stream (the loader's mapped file,
// mostly not in any cache) while the panel, tens of KB, stays in cache; 16
// interleaved 34-byte streams left the packing waiting on memory (~2.5x the
// time of a copy of the same bytes).
template <QuantType T>
void pack_panel_row(const uint8_t* row, int64_t row_step, int64_t l, int64_t nb,
                    int64_t block_bytes, uint8_t* panel) {
  constexpr BlockParts parts = block_parts(T);
  const int64_t panel_block = kRows * block_bytes;
  for (int64_t b = 0; b < nb; ++b, row += row_step) {
    uint8_t* const d = panel + b * panel_block;
    uint8_t* const m = d + parts.panel_m();
    uint8_t* const planes = d + parts.panel_planes();
    uint8_t* const codes = d + parts.panel_codes();
    std::memcpy(d + 2 * l, row, 2);
    if constexpr (parts.m >= 0) std::memcpy(m + 2 * l, row + parts.m, 2);
    if constexpr (parts.qh >= 0) {
      uint32_t qh;
      std::memcpy(&qh, row + parts.qh, 4);
      // Plane byte 4l + i gathers qh's bits i, 4 + i, ..., 28 + i: every
      // fourth bit, packed in three shift-and-mask steps.
      for (int i = 0; i < 4; ++i) {
        uint32_t x = (qh >> i) & 0x11111111u;
        x = (x | (x >> 3)) & 0x03030303u;
        x = (x | (x >> 6)) & 0x000F000Fu;
        planes[4 * l + i] = static_cast<uint8_t>(x | (x >> 12));
      }
    }
    if constexpr (T == QuantType::Q8_0) {
      for (int q = 0; q < 8; ++q) {
        uint32_t word;
        std::memcpy(&word, row + parts.qs + 4 * q, 4);
        word ^= 0x80808080u;  // int8 + 128, byte by byte
        std::memcpy(codes + 64 * q + 4 * l, &word, 4);
      }
    } else {
      for (int v = 0; v < 4; ++v) std::memcpy(codes + 64 * v + 4 * l, row + parts.qs + 4 * v, 4);
    }
  }
}

// Q4_G / Q8_G blocks (f32 scale, int8 zero, 3 pad bytes, the codes at 8):
// in a panel block the 16 scales at 0, the zeros at 64, row l's pad at
// 80 + 3l and the codes at 128, laid out as Q4_0's or Q8_0's.
constexpr int64_t kGZerosAt = 64, kGPadAt = 80, kGCodesAt = 128;
constexpr bool is_g_panel(QuantType t) { return t == QuantType::Q4_G || t == QuantType::Q8_G; }

// pack_panel_row for Q4_G / Q8_G.
template <QuantType T>
void pack_g_panel_row(const uint8_t* row, int64_t row_step, int64_t l, int64_t nb,
                      int64_t block_bytes, uint8_t* panel) {
  const int64_t panel_block = kRows * block_bytes;
  for (int64_t b = 0; b < nb; ++b, row += row_step) {
    uint8_t* const d = panel + b * panel_block;
    std::memcpy(d + 4 * l, row, 4);
    d[kGZerosAt + l] = row[4];
    std::memcpy(d + kGPadAt + 3 * l, row + 5, 3);
    uint8_t* const codes = d + kGCodesAt;
    if constexpr (T == QuantType::Q8_G) {
      for (int q = 0; q < 8; ++q) {
        uint32_t word;
        std::memcpy(&word, row + 8 + 4 * q, 4);
        word ^= 0x80808080u;  // int8 + 128, byte by byte
        std::memcpy(codes + 64 * q + 4 * l, &word, 4);
      }
    } else {
      for (int v = 0; v < 4; ++v) std::memcpy(codes + 64 * v + 4 * l, row + 8 + 4 * v, 4);
    }
  }
}

void unpack_g_panel_block(QuantType t, const uint8_t* in, int64_t l, uint8_t* block) {
  std::memcpy(block, in + 4 * l, 4);
  block[4] = in[kGZerosAt + l];
  std::memcpy(block + 5, in + kGPadAt + 3 * l, 3);
  const uint8_t* const codes = in + kGCodesAt;
  if (t == QuantType::Q8_G) {
    for (int q = 0; q < 8; ++q) {
      for (int i = 0; i < 4; ++i)
        block[8 + 4 * q + i] = static_cast<uint8_t>(codes[64 * q + 4 * l + i] ^ 0x80);
    }
    return;
  }
  for (int v = 0; v < 4; ++v) std::memcpy(block + 8 + 4 * v, codes + 64 * v + 4 * l, 4);
}

// Panel p of w (rows 16p .. 16p + 15, zero blocks past w.n) into `panel`.
template <QuantType T>
void pack_panel(const QuantMatrix& w, int64_t p, int64_t nb, int64_t block_bytes, uint8_t* panel) {
  static constexpr uint8_t kZero[64] = {};  // a row past the matrix: zero blocks
  const auto pack_row = [&](const uint8_t* row, int64_t row_step, int64_t l) {
    if constexpr (is_g_panel(T)) {
      pack_g_panel_row<T>(row, row_step, l, nb, block_bytes, panel);
    } else {
      pack_panel_row<T>(row, row_step, l, nb, block_bytes, panel);
    }
  };
  for (int64_t l = 0; l < kRows; ++l) {
    const int64_t r = p * kRows + l;
    if (r < w.n) {
      pack_row(w.row(r), block_bytes, l);
    } else {
      pack_row(kZero, 0, l);
    }
  }
}

// Row l's block b back from its panel block: the inverse of pack_panel_row.
void unpack_panel_block(QuantType t, const uint8_t* in, int64_t l, uint8_t* block) {
  const BlockParts parts = block_parts(t);
  std::memcpy(block, in + 2 * l, 2);
  if (parts.m >= 0) std::memcpy(block + parts.m, in + parts.panel_m() + 2 * l, 2);
  if (parts.qh >= 0) {
    const uint8_t* const planes = in + parts.panel_planes();
    uint32_t qh = 0;
    for (int i = 0; i < 4; ++i) {
      for (int v = 0; v < 8; ++v)
        qh |= static_cast<uint32_t>((planes[4 * l + i] >> v) & 1)
              << (4 * (v % 4) + 16 * (v / 4) + i);
    }
    std::memcpy(block + parts.qh, &qh, 4);
  }
  const uint8_t* const p = in + parts.panel_codes();
  if (t == QuantType::Q8_0) {
    for (int q = 0; q < 8; ++q) {
      for (int i = 0; i < 4; ++i) {
        block[parts.qs + 4 * q + i] = static_cast<uint8_t>(p[64 * q + 4 * l + i] ^ 0x80);
      }
    }
    return;
  }
  for (int v = 0; v < 4; ++v) std::memcpy(block + parts.qs + 4 * v, p + 64 * v + 4 * l, 4);
}

// A K type's block as parts: fp16 fields (block offset -> panel offset of
// the 16 halves) and runs of dwords (block offset, dwords -> panel offset of
// the run's first vector).
struct KField {
  int64_t at, panel_at;
};
struct KRun {
  int64_t at, dwords, panel_at;
};
struct KParts {
  KField half[2];
  int halves;
  KRun run[13];
  int runs;
};
// Q6_K's runs in the order its kernel reads them: the scales, then per
// quarter p = 2h + qq of the block (h: which 128 columns, qq: which half of
// their 32-byte runs) four vectors of qh, four of ql's low nibbles' bytes and
// four of the high ones' (quant.h).
constexpr KParts q6k_parts() {
  KParts p{{{208, 0}, {}}, 1, {{192, 4, 32}}, 1};
  for (int h = 0; h < 2; ++h) {
    for (int qq = 0; qq < 2; ++qq) {
      const int64_t at = 288 + 768 * (2 * h + qq);
      p.run[p.runs++] = {128 + 4 * (8 * h + 4 * qq), 4, at};
      p.run[p.runs++] = {4 * (16 * h + 4 * qq), 4, at + 256};
      p.run[p.runs++] = {4 * (16 * h + 8 + 4 * qq), 4, at + 512};
    }
  }
  return p;
}
constexpr KParts k_parts(QuantType t) {
  switch (t) {
    case QuantType::Q2_K:  // scales[16], qs[64], d, dmin
      return {{{80, 0}, {82, 32}}, 2, {{0, 4, 64}, {16, 16, 320}}, 2};
    case QuantType::Q3_K:  // hmask[32], qs[64], scales[12], d
      return {{{108, 0}, {}}, 1, {{96, 3, 32}, {0, 8, 224}, {32, 16, 736}}, 3};
    case QuantType::Q4_K:  // d, dmin, scales[12], qs[128]
      return {{{0, 0}, {2, 32}}, 2, {{4, 3, 64}, {16, 32, 256}}, 2};
    case QuantType::Q5_K:  // d, dmin, scales[12], qh[32], qs[128]
      return {{{0, 0}, {2, 32}}, 2, {{4, 3, 64}, {16, 8, 256}, {48, 32, 768}}, 3};
    case QuantType::Q6_K:  // ql[128], qh[64], scales[16], d
      return q6k_parts();
    default:
      throw InvalidArgument(std::string("panels: ") + std::string(quant_name(t)) +
                            " has no panel layout");
  }
}
constexpr bool is_k_panel(QuantType t) {
  return t == QuantType::Q2_K || t == QuantType::Q3_K || t == QuantType::Q4_K ||
         t == QuantType::Q5_K || t == QuantType::Q6_K;
}

// pack_panel_row for the K types.
template <QuantType T>
void pack_k_panel_row(const uint8_t* row, int64_t row_step, int64_t l, int64_t nb,
                      int64_t block_bytes, uint8_t* panel) {
  constexpr KParts parts = k_parts(T);
  const int64_t panel_block = kRows * block_bytes;
  for (int64_t b = 0; b < nb; ++b, row += row_step) {
    uint8_t* const d = panel + b * panel_block;
    for (int f = 0; f < parts.halves; ++f)
      std::memcpy(d + parts.half[f].panel_at + 2 * l, row + parts.half[f].at, 2);
    for (int r = 0; r < parts.runs; ++r) {
      const KRun& run = parts.run[r];
      for (int64_t w = 0; w < run.dwords; ++w)
        std::memcpy(d + run.panel_at + 64 * w + 4 * l, row + run.at + 4 * w, 4);
    }
  }
}

void unpack_k_panel_block(QuantType t, const uint8_t* in, int64_t l, uint8_t* block) {
  const KParts parts = k_parts(t);
  for (int f = 0; f < parts.halves; ++f)
    std::memcpy(block + parts.half[f].at, in + parts.half[f].panel_at + 2 * l, 2);
  for (int r = 0; r < parts.runs; ++r) {
    const KRun& run = parts.run[r];
    for (int64_t w = 0; w < run.dwords; ++w)
      std::memcpy(block + run.at + 4 * w, in + run.panel_at + 64 * w + 4 * l, 4);
  }
}

template <QuantType T>
void pack_k_panel(const QuantMatrix& w, int64_t p, int64_t nb, int64_t block_bytes,
                  uint8_t* panel) {
  static constexpr uint8_t kZero[256] = {};  // a row past the matrix: zero blocks
  for (int64_t l = 0; l < kRows; ++l) {
    const int64_t r = p * kRows + l;
    if (r < w.n) {
      pack_k_panel_row<T>(w.row(r), block_bytes, l, nb, block_bytes, panel);
    } else {
      pack_k_panel_row<T>(kZero, 0, l, nb, block_bytes, panel);
    }
  }
}

}  // namespace

namespace quant {
void panel_row_range(const QuantMatrix& w, int64_t r, int64_t b0, int64_t nb, uint8_t* out) {
  const QuantTraits& tr = quant_traits(w.type);
  const int64_t blocks = w.k / tr.block_elems, panel_block = kRows * tr.block_bytes;
  const uint8_t* panel = w.panels.get() + (r / kRows * blocks + b0) * panel_block;
  const bool k_type = is_k_panel(w.type);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* const block = out + b * tr.block_bytes;
    if (k_type) {
      unpack_k_panel_block(w.type, panel + b * panel_block, r % kRows, block);
    } else if (is_g_panel(w.type)) {
      unpack_g_panel_block(w.type, panel + b * panel_block, r % kRows, block);
    } else {
      unpack_panel_block(w.type, panel + b * panel_block, r % kRows, block);
    }
  }
}
}  // namespace quant

void panel_row_blocks(const QuantMatrix& w, int64_t r, uint8_t* out) {
  if (!w.panels || r < 0 || r >= w.n) {
    throw InvalidArgument("panel_row_blocks: " +
                          std::string(w.panels ? "row " + std::to_string(r) + " outside [0, " +
                                                     std::to_string(w.n) + ")"
                                               : "the matrix has no panels"));
  }
  quant::panel_row_range(w, r, 0, w.k / quant_traits(w.type).block_elems, out);
}

int64_t quant_panel_bytes(const QuantMatrix& w) {
  return (w.n + kRows - 1) / kRows * kRows * w.row_bytes;
}

void attach_panels(QuantMatrix& w, const std::function<void(int64_t rows)>& read,
                   WeightArena* arena) {
  if (!quant_has_panel_layout(w.type)) {
    throw InvalidArgument(std::string("attach_panels: ") + std::string(quant_name(w.type)) +
                          " has no panel layout");
  }
  if (w.row_bytes != quant_row_bytes(w.type, w.k) || w.n < 0 || (w.n > 0 && !w.data)) {
    throw InvalidArgument("attach_panels: the matrix's rows are not valid blocks");
  }
  if (!w.row_order.empty()) {
    bool valid = static_cast<int64_t>(w.row_order.size()) == w.n;
    for (int64_t i = 0; valid && i < w.n; ++i) valid = w.row_order[i] >= 0 && w.row_order[i] < w.n;
    if (!valid) throw InvalidArgument("attach_panels: row_order is not n rows of the matrix");
  }
  const QuantTraits& tr = quant_traits(w.type);
  const int64_t nb = w.k / tr.block_elems, panel_block = kRows * tr.block_bytes;
  const int64_t panels = (w.n + kRows - 1) / kRows;
  // 64-byte aligned: the kernels read whole 64-byte vectors, and a base off
  // by malloc's 16 bytes split every one over two cache lines.
  const size_t bytes = static_cast<size_t>(quant_panel_bytes(w));
  static_assert(WeightArena::kAlign % 64 == 0);
  std::shared_ptr<uint8_t[]> out =
      arena ? arena->allocate(bytes)
            : std::shared_ptr<uint8_t[]>(new (std::align_val_t{64}) uint8_t[bytes], [](uint8_t* p) {
                ::operator delete[](p, std::align_val_t{64});
              });
  using PackPanel = void (*)(const QuantMatrix&, int64_t, int64_t, int64_t, uint8_t*);
  PackPanel pack_one = nullptr;
  switch (w.type) {
    case QuantType::Q4_0:
      pack_one = pack_panel<QuantType::Q4_0>;
      break;
    case QuantType::Q4_1:
      pack_one = pack_panel<QuantType::Q4_1>;
      break;
    case QuantType::Q5_0:
      pack_one = pack_panel<QuantType::Q5_0>;
      break;
    case QuantType::Q5_1:
      pack_one = pack_panel<QuantType::Q5_1>;
      break;
    case QuantType::Q2_K:
      pack_one = pack_k_panel<QuantType::Q2_K>;
      break;
    case QuantType::Q3_K:
      pack_one = pack_k_panel<QuantType::Q3_K>;
      break;
    case QuantType::Q4_K:
      pack_one = pack_k_panel<QuantType::Q4_K>;
      break;
    case QuantType::Q5_K:
      pack_one = pack_k_panel<QuantType::Q5_K>;
      break;
    case QuantType::Q6_K:
      pack_one = pack_k_panel<QuantType::Q6_K>;
      break;
    case QuantType::Q4_G:
      pack_one = pack_panel<QuantType::Q4_G>;
      break;
    case QuantType::Q8_G:
      pack_one = pack_panel<QuantType::Q8_G>;
      break;
    default:  // Q8_0, the last type with a panel layout (checked above)
      pack_one = pack_panel<QuantType::Q8_0>;
  }
  const auto pack = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      pack_one(w, p, nb, tr.block_bytes, out.get() + p * nb * panel_block);
  };
  // Both halves of a load's work (reading the rows, writing the panels) are
  // memory-bound page faults and copies: the threads of the shared pool split
  // each run of kReportPanels panels per thread, then `read` hears of it.
  ThreadPool& pool = *ThreadPool::shared(0);
  const int64_t run = kReportPanels * pool.num_threads();
  for (int64_t p0 = 0; p0 < panels; p0 += run) {
    const int64_t p1 = std::min(panels, p0 + run);
    pool.parallel_for(p1 - p0, kReportPanels, [&](int64_t a, int64_t b) { pack(p0 + a, p0 + b); });
    if (read) read(std::min(w.n, p1 * kRows));
  }
  if (read) read(w.n);
  w.panels = std::move(out);
}

}  // namespace hubzoo
