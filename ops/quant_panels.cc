// The panel layout of the 32-weight block types (ops/quant.h): the rows'
// blocks interleaved 16 rows at a time, made once at load.
#include <cstring>
#include <string>

#include "base/error.h"
#include "ops/quant.h"
#include "ops/quant_internal.h"

namespace hubzoo {
namespace {

constexpr int64_t kRows = quant::kPanelRows;
constexpr int64_t kReportPanels = 1024 / kRows;  // attach_panels' `read` every 1024 rows

// Where a GGML block keeps its parts: the fp16 scale d at 0, the fp16 min m
// (Q4_1 / Q5_1), the 32 high bits qh (Q5), and the codes qs.
struct BlockParts {
  int64_t m = -1, qh = -1, qs = 2;
};
BlockParts block_parts(QuantType t) {
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

// Block b of 16 rows (null: a zero row past the matrix) into a panel block.
void pack_panel_block(QuantType t, const uint8_t* const* rows, int64_t b, uint8_t* out) {
  const QuantTraits& tr = quant_traits(t);
  const BlockParts parts = block_parts(t);
  const int64_t at = b * tr.block_bytes;
  std::memset(out, 0, static_cast<size_t>(kRows * tr.block_bytes));
  uint8_t* p = out;
  for (int64_t l = 0; l < kRows; ++l) {
    if (rows[l]) std::memcpy(p + 2 * l, rows[l] + at, 2);  // d
  }
  p += 2 * kRows;
  if (parts.m >= 0) {
    for (int64_t l = 0; l < kRows; ++l) {
      if (rows[l]) std::memcpy(p + 2 * l, rows[l] + at + parts.m, 2);
    }
    p += 2 * kRows;
  }
  if (parts.qh >= 0) {
    uint64_t masks[8] = {};
    for (int64_t l = 0; l < kRows; ++l) {
      if (!rows[l]) continue;
      uint32_t qh;
      std::memcpy(&qh, rows[l] + at + parts.qh, 4);
      for (int v = 0; v < 4; ++v) {
        for (int i = 0; i < 4; ++i) {
          masks[v] |= static_cast<uint64_t>((qh >> (4 * v + i)) & 1) << (4 * l + i);
          masks[4 + v] |= static_cast<uint64_t>((qh >> (16 + 4 * v + i)) & 1) << (4 * l + i);
        }
      }
    }
    std::memcpy(p, masks, sizeof(masks));
    p += sizeof(masks);
  }
  if (t == QuantType::Q8_0) {
    for (int q = 0; q < 8; ++q) {
      for (int64_t l = 0; l < kRows; ++l) {
        for (int i = 0; i < 4; ++i) {
          const uint8_t code = rows[l] ? rows[l][at + parts.qs + 4 * q + i] : 0;
          p[64 * q + 4 * l + i] = static_cast<uint8_t>(code ^ 0x80);  // int8 + 128
        }
      }
    }
    return;
  }
  for (int v = 0; v < 4; ++v) {
    for (int64_t l = 0; l < kRows; ++l) {
      if (rows[l]) std::memcpy(p + 64 * v + 4 * l, rows[l] + at + parts.qs + 4 * v, 4);
    }
  }
}

}  // namespace

bool quant_has_panel_layout(QuantType t) {
  switch (t) {
    case QuantType::Q4_0:
    case QuantType::Q4_1:
    case QuantType::Q5_0:
    case QuantType::Q5_1:
    case QuantType::Q8_0:
      return true;
    default:
      return false;
  }
}

int64_t quant_panel_bytes(const QuantMatrix& w) {
  return (w.n + kRows - 1) / kRows * kRows * w.row_bytes;
}

void attach_panels(QuantMatrix& w, const std::function<void(int64_t rows)>& read) {
  if (!quant_has_panel_layout(w.type)) {
    throw InvalidArgument(std::string("attach_panels: ") + std::string(quant_name(w.type)) +
                          " has no panel layout");
  }
  if (w.row_bytes != quant_row_bytes(w.type, w.k) || w.n < 0 || (w.n > 0 && !w.data)) {
    throw InvalidArgument("attach_panels: the matrix's rows are not valid blocks");
  }
  const QuantTraits& tr = quant_traits(w.type);
  const int64_t nb = w.k / tr.block_elems, panel_block = kRows * tr.block_bytes;
  std::shared_ptr<uint8_t[]> out(new uint8_t[static_cast<size_t>(quant_panel_bytes(w))]);
  for (int64_t p = 0; p * kRows < w.n; ++p) {
    const uint8_t* rows[kRows];
    for (int64_t l = 0; l < kRows; ++l)
      rows[l] = p * kRows + l < w.n ? w.row(p * kRows + l) : nullptr;
    for (int64_t b = 0; b < nb; ++b) {
      pack_panel_block(w.type, rows, b, out.get() + (p * nb + b) * panel_block);
    }
    if (read && (p + 1) % kReportPanels == 0) read(std::min(w.n, (p + 1) * kRows));
  }
  if (read) read(w.n);
  w.panels = std::move(out);
}

}  // namespace hubzoo
