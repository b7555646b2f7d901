// Memory for the weights a decode step streams (QuantMatrix::panels), carved
// from 2 MiB-aligned chunks that are backed by transparent huge pages once a
// model has loaded.
//
// A decode step reads every weight once. On 4 KiB pages that is a TLB miss
// and a page walk every 4 KiB, and the hardware prefetcher stops at each
// page: one thread streamed 21-27 GB/s from 4 KiB pages and 30-33 GB/s from
// huge pages on this project's machines, and with its panels on huge pages
// SmolLM2 Q4_0 / Q8_0 decodes 1.15x / 1.10x faster (bench/results/
// huge_pages.md). Most of a model's matrices are far smaller than 2 MiB
// (SmolLM2's are 0.2-1 MiB), so one load's matrices share chunks.
//
// The huge pages are asked for after the load, by MADV_COLLAPSE on a thread
// of its own, not at allocation: faulting huge pages in as the panels are
// written made loads erratic (0.05-0.32 s for SmolLM2 Q4_0, 0.21-2.03 s for
// Qwen2.5-0.5B, whenever the kernel had to compact memory for them). A model is
// ready as fast as before and reads its weights from huge pages a moment
// later. It is advice: where the kernel cannot (THP off, no memory to
// compact), the pages stay as they are, and nothing else changes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hubzoo {

class WeightArena {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  // A chunk's size; an allocation of more than half of it gets a chunk of
  // its own (its size rounded up to huge pages).
  static constexpr size_t kChunkBytes = size_t{32} << 20;
  static constexpr size_t kAlign = 64;
  // The most one allocation may ask for (std::bad_alloc above it).
  static constexpr size_t kMaxBytes = size_t{1} << 46;

  WeightArena();
  ~WeightArena();
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

  // `bytes` of uninitialised memory, kAlign-aligned, in a chunk of
  // this arena. The chunk is mapped (lazily: only what is written becomes
  // resident) and unmapped when the arena and every allocation in it are
  // gone. Thread-safe. Throws std::bad_alloc when the memory cannot be mapped
  // or `bytes` is over kMaxBytes.
  std::shared_ptr<uint8_t[]> allocate(size_t bytes);

  // Asks for huge pages over the whole 2 MiB pages allocated so far, on a
  // thread of its own, and returns at once; later allocations go to new
  // chunks. The thread holds the chunks it works on.
  void collapse();

  // Waits until every collapse() of the process so far has finished.
  static void wait_for_collapses();

  // Bytes the kernel agreed to back by huge pages in this arena's collapses
  // so far (wait_for_collapses() first): for tests and benchmarks.
  int64_t collapsed_bytes() const;

  // Chunks mapped in the process now (tests: a chunk goes with its last user).
  static int64_t live_chunks();

 private:
  struct Chunk;
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

// The process's anonymous memory on transparent huge pages (AnonHugePages of
// /proc/self/smaps_rollup), 0 where the kernel does not say: for benchmarks
// and tests.
int64_t anon_huge_page_bytes();

}  // namespace hubzoo
