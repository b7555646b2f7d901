#include "ops/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; an older kernel answers EINVAL, and nothing changes
#endif

namespace hubzoo {
namespace {

std::atomic<int64_t> g_live_chunks{0};

// Under AddressSanitizer a chunk is poisoned but for its allocations, each
// followed by a gap, so that a kernel reading past its matrix is reported
// as it was when each matrix was a heap block of its own.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kRedzone = 64;
void poison(const void* p, size_t n) { ASAN_POISON_MEMORY_REGION(p, n); }
void unpoison(const void* p, size_t n) { ASAN_UNPOISON_MEMORY_REGION(p, n); }
#else
constexpr size_t kRedzone = 0;
void poison(const void*, size_t) {}
void unpoison(const void*, size_t) {}
#endif

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The collapses started and not yet waited for, process-wide. A std::async
// future waits for its task when destroyed, so at exit the tasks finish
// before the chunks they hold are unmapped.
struct Collapses {
  std::mutex mu;
  std::vector<std::future<void>> running;
};
Collapses& collapses() {
  static Collapses c;
  return c;
}

}  // namespace

struct WeightArena::Chunk {
  uint8_t* base = nullptr;
  size_t size = 0;  // bytes mapped from base, whole huge pages

  explicit Chunk(size_t bytes) : size(round_up(bytes, kHugePage)) {
    // Mapped with a huge page of slack, then trimmed to a 2 MiB-aligned base
    // (a huge page must start on one).
    const size_t mapped = size + kHugePage;
    void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    const auto raw = reinterpret_cast<uintptr_t>(m);
    const uintptr_t aligned = round_up(raw, kHugePage), end = raw + mapped;
    if (aligned > raw) munmap(m, aligned - raw);
    if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
    base = reinterpret_cast<uint8_t*>(aligned);
    poison(base, size);
    g_live_chunks.fetch_add(1, std::memory_order_relaxed);
  }
  ~Chunk() {
    unpoison(base, size);  // the shadow would outlive the mapping otherwise
    munmap(base, size);
    g_live_chunks.fetch_sub(1, std::memory_order_relaxed);
  }
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
};

// What the arena and its collapses share: the collapse thread keeps it (and
// its chunks) for as long as it runs, whether the arena is still there or not.
struct WeightArena::Shared {
  std::mutex mu;
  std::shared_ptr<Chunk> open;  // where small allocations go
  size_t used = 0;              // bytes of `open` handed out
  // Chunks filled (or given to one allocation) and not yet collapsed, with
  // the bytes handed out from each.
  std::vector<std::pair<std::shared_ptr<Chunk>, size_t>> filled;
  std::atomic<int64_t> collapsed{0};
};

WeightArena::WeightArena() : shared_(std::make_shared<Shared>()) {}
WeightArena::~WeightArena() = default;

std::shared_ptr<uint8_t[]> WeightArena::allocate(size_t bytes) {
  if (bytes > kMaxBytes) throw std::bad_alloc();  // before any rounding could wrap
  const size_t need = round_up(std::max<size_t>(bytes, 1), kAlign) + kRedzone;
  Shared& s = *shared_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (need > kChunkBytes / 2) {
    auto chunk = std::make_shared<Chunk>(need);
    s.filled.emplace_back(chunk, need);
    unpoison(chunk->base, bytes);
    return std::shared_ptr<uint8_t[]>(chunk, chunk->base);  // owns the chunk
  }
  if (!s.open || s.used + need > s.open->size) {
    auto chunk = std::make_shared<Chunk>(kChunkBytes);
    if (s.open) s.filled.emplace_back(std::move(s.open), s.used);
    s.open = std::move(chunk);
    s.used = 0;
  }
  uint8_t* at = s.open->base + s.used;
  s.used += need;
  unpoison(at, bytes);
  return std::shared_ptr<uint8_t[]>(s.open, at);
}

void WeightArena::collapse() {
  std::vector<std::pair<std::shared_ptr<Chunk>, size_t>> work;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    work = std::move(shared_->filled);
    shared_->filled.clear();
    if (shared_->open) work.emplace_back(std::move(shared_->open), shared_->used);
    shared_->open.reset();
    shared_->used = 0;
  }
  if (work.empty()) return;
  Collapses& c = collapses();
  std::lock_guard<std::mutex> lock(c.mu);
  std::erase_if(c.running, [](const std::future<void>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  try {
    c.running.push_back(std::async(std::launch::async, [work = std::move(work), s = shared_] {
      for (const auto& [chunk, used] : work) {
        // Whole huge pages only: the last one's rest is untouched, not resident.
        const size_t whole = used / kHugePage * kHugePage;
        if (whole > 0 && madvise(chunk->base, whole, MADV_COLLAPSE) == 0) {
          s->collapsed.fetch_add(static_cast<int64_t>(whole), std::memory_order_relaxed);
        }
      }
    }));
  } catch (const std::system_error&) {
    // No thread to spare: the pages stay as they are (it was advice).
  }
}

void WeightArena::wait_for_collapses() {
  std::vector<std::future<void>> running;
  {
    Collapses& c = collapses();
    std::lock_guard<std::mutex> lock(c.mu);
    running = std::move(c.running);
    c.running.clear();
  }
  for (auto& f : running) f.wait();
}

int64_t WeightArena::collapsed_bytes() const {
  return shared_->collapsed.load(std::memory_order_relaxed);
}

int64_t anon_huge_page_bytes() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(rollup, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14)) * 1024;
  }
  return 0;
}

int64_t WeightArena::live_chunks() { return g_live_chunks.load(std::memory_order_relaxed); }

}  // namespace hubzoo
