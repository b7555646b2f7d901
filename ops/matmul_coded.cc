// Coding bf16 panels in 12 bits per weight and reading them back
// (ops/matmul_coded.h); the kernels are in ops/matmul_bf16_coded-inl.h.
#include "ops/matmul_coded.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "hwy/aligned_allocator.h"
#include "ops/matmul.h"
#include "ops/panel_memory.h"

namespace hubzoo {
namespace {

constexpr int64_t kPairs = kKBlockPairs;
static_assert(kKBlockPairs * 2 == kKBlock, "a block of pairs is a block of matmul.h's chain");

void free_coded(uint8_t* p) { std::free(p); }

// Pairs of k block b multiplies: the last block's pairs stop at ceil((K - k0) / 2).
int64_t pairs_in_block(int64_t K, int64_t b) {
  return (std::min(kKBlock, K - b * kKBlock) + 1) / 2;
}

// Byte position in a pair of column c at k offset dk (matmul_coded.h).
constexpr std::array<std::array<uint8_t, kPanel>, 2> kPositions = [] {
  std::array<std::array<uint8_t, kPanel>, 2> pos{};
  for (int dk = 0; dk < 2; ++dk) {
    for (int c = 0; c < kPanel; ++c) pos[dk][c] = static_cast<uint8_t>(coded_position(c, dk));
  }
  return pos;
}();

// Panel `panel` of plain bf16 panels (K * kPanel words) coded into `out`
// (zeroed, the panel's bytes); escapes appended to `escapes`, each block's
// first escape counted from the panel's first.
void code_panel(const uint16_t* plain, int64_t K, const CodedBf16& c, uint8_t* out,
                std::vector<uint8_t>& escapes) {
  std::array<uint16_t, kPairs * 64> words;
  for (int64_t b = 0; b < c.kblocks; ++b) {
    const int64_t k0 = b * kKBlock, pairs = pairs_in_block(K, b);
    // The block's weights in pair order (+0 past K: only the odd last pair's
    // k + 1 is ever read), row by row of the panel.
    words.fill(0);
    for (int64_t k = k0; k < std::min(K, k0 + kKBlock); ++k) {
      uint16_t* pair = words.data() + (k - k0) / 2 * 64;
      const auto& pos = kPositions[(k - k0) % 2];
      for (int col = 0; col < kPanel; ++col) pair[pos[col]] = plain[k * kPanel + col];
    }
    const int64_t used = pairs * 64;
    std::array<uint16_t, 256> count{};  // at most 2048 each
    for (int64_t i = 0; i < used; ++i) ++count[words[i] >> 8];
    // The 15 most frequent high bytes (ties: the smaller byte), codes 0..14.
    std::array<uint8_t, 256> order;
    for (int v = 0; v < 256; ++v) order[v] = static_cast<uint8_t>(v);
    std::partial_sort(order.begin(), order.begin() + kEscapeCode, order.end(),
                      [&](uint8_t x, uint8_t y) { return count[x] > count[y]; });
    std::array<uint8_t, 256> code;
    code.fill(kEscapeCode);
    uint8_t* table = out + b * 16;
    for (uint8_t i = 0; i < kEscapeCode && count[order[i]] > 0; ++i) {
      table[i] = order[i];
      code[order[i]] = i;
    }
    uint8_t* block = out + c.header_bytes + b * kCodedBlockBytes;
    const size_t first = escapes.size();
    for (int64_t q = 0; q < pairs; ++q) {
      const uint16_t* pair = words.data() + q * 64;
      uint8_t* low = block + coded_low_at(q);
      uint8_t* codes = block + coded_codes_at(q);
      const int shift = 4 * (q % 2);
      bool escaped = false;
      for (int j = 0; j < 64; ++j) {
        const uint8_t cd = code[pair[j] >> 8];
        low[j] = static_cast<uint8_t>(pair[j] & 0xFF);
        codes[j] |= static_cast<uint8_t>(cd << shift);
        escaped |= cd == kEscapeCode;
      }
      for (int j = 0; j < 64 && escaped; ++j) {
        if (code[pair[j] >> 8] == kEscapeCode) {
          escapes.push_back(static_cast<uint8_t>(pair[j] >> 8));
        }
      }
    }
    uint32_t* info = reinterpret_cast<uint32_t*>(out + c.kblocks * 16) + 2 * b;
    info[0] = static_cast<uint32_t>(first);  // made absolute once all panels are coded
    info[1] = static_cast<uint32_t>(escapes.size() - first);
  }
}

// Block b of panel p as words, pair q's at out[q * 64 + j] (byte position j).
void decode_block(const CodedBf16& c, int64_t K, int64_t p, int64_t b, uint16_t* out) {
  const uint8_t* table = c.table(p, b);
  const uint8_t* block = c.block(p, b);
  const uint8_t* esc = c.escapes.data() + c.escape_info(p, b)[0];
  const int64_t pairs = pairs_in_block(K, b);
  for (int64_t q = 0; q < pairs; ++q) {
    for (int j = 0; j < 64; ++j) {
      const uint8_t cd = (block[coded_codes_at(q) + j] >> (4 * (q % 2))) & 0xF;
      const uint16_t hi = cd == kEscapeCode ? *esc++ : table[cd];
      out[q * 64 + j] = static_cast<uint16_t>(hi << 8 | block[coded_low_at(q) + j]);
    }
  }
}

const CodedBf16& coded_of(const PackedMatrix& p) {
  if (!p.is_coded()) throw InvalidArgument("matmul_coded: the matrix is not coded");
  return *p.coded;
}

}  // namespace

PackedMatrix to_bf16_coded(PackedMatrix p, bool only_if_smaller) {
  if (p.is_coded() || !p.is_half() || p.f16 || p.bf16_tiles || p.n == 0 || p.k == 0) {
    return p;
  }
  const int64_t panels = p.num_panels(), K = p.k;
  auto c = std::make_shared<CodedBf16>();
  c->kblocks = (K + kKBlock - 1) / kKBlock;
  c->header_bytes = (c->kblocks * 24 + 63) / 64 * 64;
  c->panel_bytes = c->header_bytes + c->kblocks * kCodedBlockBytes;
  // A short K's last block is stored whole: where that leaves nothing saved
  // (K = 96: 12 bits a weight for 128 k's), the matrix stays plain.
  if (only_if_smaller && panels * c->panel_bytes >= p.bytes()) return p;
  c->data = {static_cast<uint8_t*>(alloc_panel_memory(panels * c->panel_bytes, 0)), &free_coded};
  // Panels coded in parallel (a load codes every bf16 matrix once), each
  // thread's escapes kept apart, then joined in panel order.
  const int64_t threads = std::clamp<int64_t>(
      std::min<int64_t>(std::thread::hardware_concurrency(), panels * K * kPanel / (1 << 16)), 1,
      16);
  std::vector<std::vector<uint8_t>> escapes(static_cast<size_t>(threads));
  const auto code_range = [&](int64_t t) {
    for (int64_t panel = t * panels / threads; panel < (t + 1) * panels / threads; ++panel) {
      code_panel(p.half.get() + panel * K * kPanel, K, *c, c->data.get() + panel * c->panel_bytes,
                 escapes[t]);
    }
  };
  {
    std::vector<std::jthread> pool;
    for (int64_t t = 1; t < threads; ++t) pool.emplace_back(code_range, t);
    code_range(0);
  }
  int64_t total = 0;
  for (const auto& e : escapes) total += static_cast<int64_t>(e.size());
  // More than one stored weight in 64 escaping: not the weights this coding is for
  // (a block with escapes runs a slower loop, and each escape costs a byte);
  // more escapes than a uint32 counts: kept plain.
  if (total * 64 > panels * K * kPanel || total > std::numeric_limits<uint32_t>::max()) return p;
  c->escapes.reserve(static_cast<size_t>(total));
  for (int64_t t = 0; t < threads; ++t) {
    const auto base = static_cast<uint32_t>(c->escapes.size());
    for (int64_t panel = t * panels / threads; panel < (t + 1) * panels / threads; ++panel) {
      uint32_t* info =
          reinterpret_cast<uint32_t*>(c->data.get() + panel * c->panel_bytes + c->kblocks * 16);
      for (int64_t b = 0; b < c->kblocks; ++b) info[2 * b] += base;
    }
    c->escapes.insert(c->escapes.end(), escapes[t].begin(), escapes[t].end());
  }
  PackedMatrix coded;
  coded.n = p.n;
  coded.k = p.k;
  coded.bf16_activations = p.bf16_activations;
  coded.coded = std::move(c);
  return coded;
}

void coded_panels(const PackedMatrix& p, int64_t p0, int64_t p1, uint16_t* out) {
  const CodedBf16& c = coded_of(p);
  const int64_t K = p.k;
  std::vector<uint16_t> words(static_cast<size_t>(kPairs * 64));
  for (int64_t panel = p0; panel < p1; ++panel) {
    uint16_t* plain = out + (panel - p0) * K * kPanel;
    for (int64_t b = 0; b < c.kblocks; ++b) {
      decode_block(c, K, panel, b, words.data());
      const int64_t k0 = b * kKBlock;
      for (int64_t k = k0; k < std::min(K, k0 + kKBlock); ++k) {
        const uint16_t* pair = words.data() + (k - k0) / 2 * 64;
        const auto& pos = kPositions[(k - k0) % 2];
        for (int col = 0; col < kPanel; ++col) plain[k * kPanel + col] = pair[pos[col]];
      }
    }
  }
}

void coded_row(const PackedMatrix& p, int64_t row, uint16_t* out) {
  const CodedBf16& c = coded_of(p);
  const int64_t K = p.k, panel = row / kPanel, column = row % kPanel;
  std::vector<uint16_t> words;
  for (int64_t b = 0; b < c.kblocks; ++b) {
    const int64_t k0 = b * kKBlock, k1 = std::min(K, k0 + kKBlock);
    if (c.escape_info(panel, b)[1] > 0) {  // escapes: the block decoded in order
      words.resize(static_cast<size_t>(kPairs * 64));
      decode_block(c, K, panel, b, words.data());
      for (int64_t k = k0; k < k1; ++k) {
        out[k] = words[(k - k0) / 2 * 64 + coded_position(column, (k - k0) % 2)];
      }
      continue;
    }
    const uint8_t* table = c.table(panel, b);
    const uint8_t* block = c.block(panel, b);
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t q = (k - k0) / 2;
      const int j = coded_position(column, (k - k0) % 2);
      const uint8_t cd = (block[coded_codes_at(q) + j] >> (4 * (q % 2))) & 0xF;
      out[k] = static_cast<uint16_t>(table[cd] << 8 | block[coded_low_at(q) + j]);
    }
  }
}

uint16_t coded_at(const PackedMatrix& p, int64_t row, int64_t col) {
  std::vector<uint16_t> values(static_cast<size_t>(p.k));
  coded_row(p, row, values.data());
  return values[col];
}

void coded_through_plain(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t p0, int64_t p1,
                         PlainTile tile) {
  constexpr int64_t kGroup = 8;
  const int64_t K = a.w->k;
  thread_local hwy::AlignedFreeUniquePtr<uint16_t[]> plain;
  thread_local int64_t capacity = 0;
  for (int64_t pg = p0; pg < p1; pg += kGroup) {
    const int64_t pe = std::min(p1, pg + kGroup);
    const int64_t words = std::max<int64_t>(1, (pe - pg) * K * kPanel);
    if (words > capacity) {
      plain = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(words));
      if (!plain) throw std::bad_alloc();
      capacity = words;
    }
    coded_panels(*a.w, pg, pe, plain.get());
    PackedMatrix view;
    view.n = std::min(a.w->n, pe * kPanel) - pg * kPanel;
    view.k = K;
    view.half = {plain.get(), [](uint16_t*) {}};  // not owned
    view.bf16_activations = a.w->bf16_activations;
    MatmulArgs b = a;
    b.w = &view;
    b.y = a.y + pg * kPanel;
    b.bias = a.bias ? a.bias + pg * kPanel : nullptr;
    tile(b, r0, r1, 0, pe - pg);
  }
}

PackedMatrix from_bf16_coded(const PackedMatrix& p) {
  coded_of(p);
  std::vector<uint16_t> rows(static_cast<size_t>(p.n * p.k));
  for (int64_t r = 0; r < p.n; ++r) coded_row(p, r, rows.data() + r * p.k);
  PackedMatrix plain =
      pack_weights_concat({{.rows = p.n, .bf16_bits = rows.data()}}, p.k, PanelType::kBF16);
  plain.bf16_activations = p.bf16_activations;
  return plain;
}

}  // namespace hubzoo
