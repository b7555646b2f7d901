// Internal to the Jinja engine: the resource accounting of the render in
// progress on this thread, and the ownership rules that keep values a template
// builds from leaking or overflowing the stack.
//
// Memory: every string, list and dict entry a render builds is charged before
// it is allocated. Strings and lists count while they are alive (their
// deleter credits them back), so a template that rebuilds a growing string
// in a loop pays for what it holds, not for everything it ever built; dict
// entries and temporaries (a join's result before it becomes a value, a repr
// being printed) are checked against what is left. Code running outside a
// render (from_json on a context, tests calling a filter) charges nothing.
//
// CPU: each executed node, evaluated call and loop iteration is a step; every
// few thousand steps the thread's CPU time is compared with the limit.
//
// Depth: printing, comparing and serialising values recurse, so they go
// through DepthGuard; destroying values does not recurse (Reclaim defers a
// container's deletion to a loop on this thread), so deep values are freed
// in constant stack.
//
// Cycles: namespaces are the only mutable containers, so every reference
// cycle runs through one (or through loop.changed()'s memory, also a Dict).
// The render registers each such Dict and empties the survivors when it
// ends; closures refer to their frames weakly (see eval.cc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jinja/eval.h"
#include "jinja/value.h"

namespace hubzoo::jinja {

// Bytes charged per value besides its payload (the heap blocks of the
// object and its shared_ptr control block).
inline constexpr size_t kValueOverhead = 64;
// What one piece of a split string costs until it is a list item.
inline constexpr size_t kPieceBytes = sizeof(Value) + kValueOverhead + sizeof(std::string);
// a * b, saturating (sizes to check against the budget).
inline size_t mul_sat(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

// One render's accounting, installed for the rendering thread while it lives
// (renders nest: the previous one is restored).
class Sandbox {
 public:
  explicit Sandbox(const RenderLimits& limits);
  ~Sandbox();  // empties the mutable dicts still alive (cycles), then uninstalls
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // The render on this thread, or nullptr outside one.
  static Sandbox* current();

  const RenderLimits& limits() const { return limits_; }
  // Throws LimitError (naming `what`) unless `bytes` more fit the budget; charges them.
  void charge(size_t bytes, const char* what);
  // Throws LimitError unless `bytes` more would fit; charges nothing (temporaries).
  void check(size_t bytes, const char* what);
  int64_t live_bytes() const { return live_->load(std::memory_order_relaxed); }
  // The counter a value's deleter credits (shared: a value may outlive the render).
  const std::shared_ptr<std::atomic<int64_t>>& counter() const { return live_; }
  // `n` units of work; throws LimitError when the render's CPU time is exceeded.
  void step(int64_t n = 1);
  // A dict whose contents change during the render (a namespace, a memory
  // cell): emptied when the render ends if anything still holds it.
  void track_mutable(const std::shared_ptr<Dict>& d);

 private:
  RenderLimits limits_;
  Sandbox* prev_;
  std::shared_ptr<std::atomic<int64_t>> live_;
  int64_t steps_ = 0;
  int64_t next_clock_check_ = 0;
  int64_t cpu_start_ns_ = 0;
  std::vector<std::weak_ptr<Dict>> mutables_;
  size_t mutables_pruned_ = 0;  // size after the last pruning of expired entries
};

// The current render's charge/check/step, no-ops outside a render.
void charge_bytes(size_t bytes, const char* what);
void check_bytes(size_t bytes, const char* what);
void charge_steps(int64_t n = 1);

// Deletes `p` with `del` now, or, when a deletion is already running on this
// thread, after it: nested containers are freed by a loop, not by recursion.
void defer_delete(void* p, void (*del)(void*)) noexcept;

// Factories for the shared payloads of Value: charged to the current render
// (credited back on destruction) and freed through defer_delete.
std::shared_ptr<const std::string> new_string(std::string s);
std::shared_ptr<List> new_list(List items);
std::shared_ptr<Dict> new_dict();
std::shared_ptr<const Callable> new_callable(Callable c);

// Counts nesting while printing, comparing or serialising a value; throws
// LimitError beyond RenderLimits::max_value_depth (a default outside a render).
class DepthGuard {
 public:
  explicit DepthGuard(const char* what);
  ~DepthGuard();
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

// Test hook: containers (lists, dicts, callables) alive on any thread that the
// factories above created. A render that leaks leaves this higher.
int64_t live_containers();

}  // namespace hubzoo::jinja
