// What limits the AMX-BF16 matmul kernel (ops/matmul_bf16_amx-inl.h): its
// loop of steps (32 rows of x x one panel over all of K: per 32 k, two tile
// loads of x, two of the panel, four tdpbf16ps), stand-alone, with its
// operands 64-byte aligned or 16 bytes off, and each step's totals stored to
// a small buffer or to their place in a y of M x N floats.
//
//   amx_bf16_loop [--m M] [--n N] [--k K] [--rounds R]
//
// One thread; medians of R rounds, the variants alternating within a round.
// Prints nothing but a note on a CPU without AMX-BF16.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cpu_amx.h"

namespace {

struct Variant {
  const char* name;
  int64_t offset_bytes;  // of x and the panels from a 64-byte boundary
  bool totals_to_y;
  bool staged = false;  // totals to a panel's staging block, copied to y after the panel
};

#if defined(__x86_64__)
void store_totals(float* c, int64_t stride_bytes, int64_t row_floats) {
  asm volatile(
      "tilestored %%tmm0, (%0,%2,1)\n\ttilestored %%tmm1, (%1,%2,1)\n\t"
      "tilestored %%tmm2, (%3,%2,1)\n\ttilestored %%tmm3, (%4,%2,1)"
      :
      : "r"(c), "r"(c + 16), "r"(stride_bytes), "r"(c + 16 * row_floats),
        "r"(c + 16 * row_floats + 16)
      : "memory");
}

// GFLOP/s of one pass over the product.
double run(const Variant& v, int64_t m, int64_t n, int64_t k, std::vector<char>& xbuf,
           std::vector<char>& wbuf, std::vector<float>& y) {
  const auto aligned = [&](std::vector<char>& b) {
    const auto p = reinterpret_cast<uintptr_t>(b.data());
    return reinterpret_cast<const uint16_t*>(((p + 63) & ~uintptr_t{63}) + v.offset_bytes);
  };
  const uint16_t* x = aligned(xbuf);
  const uint16_t* w = aligned(wbuf);
  const int64_t ld = (k / 32 | 1) * 32, blocks = k / 32;  // x's row stride, as the kernel's
  alignas(64) static float small[32 * 32];
  std::vector<float> stage(static_cast<size_t>(m * 32));
  hubzoo::AmxTileConfig::load_16x64();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t p = 0; p < n / 32; ++p) {
    const uint16_t* wp = w + p * k * 32;
    for (int64_t r = 0; r < m; r += 32) {
      asm volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::
                       : "memory");
      for (int64_t b = 0; b < blocks; ++b) {
        const uint16_t* a = x + r * ld + b * 32;
        hubzoo::amx_bf16_block<true>(a, a + 16 * ld, ld * 2, wp + b * 32 * 32);
      }
      if (v.staged) {
        store_totals(stage.data() + r * 32, 32 * 4, 32);
      } else if (v.totals_to_y) {
        store_totals(y.data() + r * n + p * 32, n * 4, n);
      } else {
        store_totals(small, 32 * 4, 32);
      }
    }
    for (int64_t r = 0; v.staged && r < m; ++r) {
      std::memcpy(y.data() + r * n + p * 32, stage.data() + r * 32, 32 * sizeof(float));
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  asm volatile("tilerelease" ::: "memory");
  return 2.0 * m * n * k / s * 1e-9;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  int64_t m = 512, n = 3072, k = 576;
  int rounds = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t value = std::atoll(argv[i + 1]);
    if (flag == "--m") {
      m = value;
    } else if (flag == "--n") {
      n = value;
    } else if (flag == "--k") {
      k = value;
    } else if (flag == "--rounds") {
      rounds = static_cast<int>(value);
    } else {
      std::fprintf(stderr, "usage: %s [--m M] [--n N] [--k K] [--rounds R]\n", argv[0]);
      return 2;
    }
  }
  if (m <= 0 || m % 32 || n <= 0 || n % 32 || k <= 0 || k % 32 || rounds <= 0) {
    std::fprintf(stderr, "M, N and K must be positive multiples of 32\n");
    return 2;
  }
#if defined(__x86_64__)
  if (!hubzoo::amx_bf16_ready()) {
    std::printf("no AMX-BF16 on this CPU (or no tile state from Linux): nothing to measure\n");
    return 0;
  }
  const Variant variants[] = {{"aligned, totals to a 4 KiB buffer", 0, false},
                              {"16 bytes off, totals to a 4 KiB buffer", 16, false},
                              {"aligned, totals to y", 0, true},
                              {"aligned, totals to y after each panel", 0, true, true}};
  constexpr int kVariants = 4;
  const int64_t ld = (k / 32 | 1) * 32;
  std::vector<char> xbuf(static_cast<size_t>(m * ld * 2 + 128)),
      wbuf(static_cast<size_t>(n * k * 2 + 128));
  for (size_t i = 0; i + 1 < xbuf.size(); i += 2) xbuf[i + 1] = 0x3f;  // bf16 ~1.0
  for (size_t i = 0; i + 1 < wbuf.size(); i += 2) wbuf[i + 1] = 0x3f;
  std::vector<float> y(static_cast<size_t>(m * n));
  std::vector<double> gflops[kVariants];
  for (int r = 0; r < rounds; ++r) {
    for (int v = 0; v < kVariants; ++v)
      gflops[v].push_back(run(variants[v], m, n, k, xbuf, wbuf, y));
  }
  std::printf("M %ld, N %ld, K %ld, one thread, median of %d rounds (min-max), GFLOP/s:\n",
              static_cast<long>(m), static_cast<long>(n), static_cast<long>(k), rounds);
  for (int v = 0; v < kVariants; ++v) {
    auto g = gflops[v];
    std::sort(g.begin(), g.end());
    std::printf("  %-40s %7.1f (%.1f-%.1f)\n", variants[v].name, g[g.size() / 2], g.front(),
                g.back());
  }
#else
  std::printf("not an x86-64 build: nothing to measure\n");
#endif
  return 0;
}
