#include "jinja/sandbox.h"

#include <time.h>

#include <type_traits>
#include <utility>

namespace hubzoo::jinja {
namespace {

thread_local Sandbox* t_current = nullptr;
thread_local int t_depth = 0;
std::atomic<int64_t> g_live_containers{0};

constexpr int kDefaultMaxDepth = 256;  // outside a render
constexpr int64_t kStepsPerClockCheck = 4096;

int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

[[noreturn]] void over_budget(const char* what, size_t limit) {
  throw LimitError(std::string(what) + " exceeds max_value_bytes (" + std::to_string(limit) +
                   "): the template builds too much data");
}

// A value payload's deleter: credits its charge and frees it via defer_delete.
template <class T>
struct Reclaim {
  std::shared_ptr<std::atomic<int64_t>> counter;  // null: built outside a render
  int64_t bytes = 0;
  bool container = false;
  void operator()(const T* p) const noexcept {
    int64_t credit = bytes;
    if constexpr (std::is_same_v<T, Dict>) credit += p ? p->charged_bytes : 0;
    if (counter) counter->fetch_sub(credit, std::memory_order_relaxed);
    if (container) g_live_containers.fetch_sub(1, std::memory_order_relaxed);
    using Mutable = std::remove_const_t<T>;
    defer_delete(const_cast<Mutable*>(p), [](void* q) { delete static_cast<Mutable*>(q); });
  }
};

// Charges `bytes` (before `make` allocates) and wraps make()'s object.
template <class T, class Make>
std::shared_ptr<T> adopt(size_t bytes, bool container, const char* what, Make make) {
  Reclaim<T> r;
  r.container = container;
  if (Sandbox* sb = Sandbox::current()) {
    sb->charge(bytes, what);
    r.counter = sb->counter();
    r.bytes = static_cast<int64_t>(bytes);
  }
  if (container) g_live_containers.fetch_add(1, std::memory_order_relaxed);
  T* p = nullptr;
  try {
    p = make();
  } catch (...) {
    r(p);  // undoes the charge
    throw;
  }
  return std::shared_ptr<T>(p, r);  // if this throws, it calls r(p)
}

}  // namespace

Sandbox::Sandbox(const RenderLimits& limits)
    : limits_(limits),
      prev_(t_current),
      live_(std::make_shared<std::atomic<int64_t>>(0)),
      cpu_start_ns_(thread_cpu_ns()) {
  t_current = this;
}

Sandbox::~Sandbox() {
  // Emptying a dict can free values that hold other tracked dicts; those are
  // emptied in turn when the loop reaches them (or are already gone).
  for (size_t k = 0; k < mutables_.size(); ++k) {
    if (auto d = mutables_[k].lock()) {
      auto items = std::move(d->items);
      d->items.clear();
    }
  }
  t_current = prev_;
}

Sandbox* Sandbox::current() { return t_current; }

void Sandbox::check(size_t bytes, const char* what) {
  step(1 + static_cast<int64_t>(bytes >> 16));  // building `bytes` is work, too
  const int64_t live = live_bytes();
  if (bytes > limits_.max_value_bytes ||
      live + static_cast<int64_t>(bytes) > static_cast<int64_t>(limits_.max_value_bytes)) {
    over_budget(what, limits_.max_value_bytes);
  }
}

void Sandbox::charge(size_t bytes, const char* what) {
  check(bytes, what);
  live_->fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

void Sandbox::step(int64_t n) {
  steps_ += n;
  if (steps_ < next_clock_check_) return;
  next_clock_check_ = steps_ + kStepsPerClockCheck;
  const double used = static_cast<double>(thread_cpu_ns() - cpu_start_ns_) * 1e-9;
  if (used > limits_.max_cpu_seconds) {
    throw LimitError("render exceeds max_cpu_seconds (" + std::to_string(limits_.max_cpu_seconds) +
                     ")");
  }
}

void Sandbox::track_mutable(const std::shared_ptr<Dict>& d) {
  if (mutables_.size() >= 2 * mutables_pruned_ + 64) {  // drop the expired: amortised O(1)
    std::erase_if(mutables_, [](const std::weak_ptr<Dict>& w) { return w.expired(); });
    mutables_pruned_ = mutables_.size();
  }
  mutables_.push_back(d);
}

void charge_bytes(size_t bytes, const char* what) {
  if (t_current) t_current->charge(bytes, what);
}
void check_bytes(size_t bytes, const char* what) {
  if (t_current) t_current->check(bytes, what);
}
void charge_steps(int64_t n) {
  if (t_current) t_current->step(n);
}

void defer_delete(void* p, void (*del)(void*)) noexcept {
  struct Queue {
    std::vector<std::pair<void*, void (*)(void*)>> pending;
    bool draining = false;
  };
  static thread_local Queue q;
  if (q.draining) {
    try {
      q.pending.emplace_back(p, del);
      return;
    } catch (...) {  // no memory for the queue: free it now, recursively
      del(p);
      return;
    }
  }
  q.draining = true;
  del(p);  // may queue the containers it held
  while (!q.pending.empty()) {
    auto [x, d] = q.pending.back();
    q.pending.pop_back();
    d(x);
  }
  q.draining = false;
}

std::shared_ptr<const std::string> new_string(std::string s) {
  return adopt<const std::string>(s.size() + kValueOverhead, false, "a string",
                                  [&] { return new std::string(std::move(s)); });
}

std::shared_ptr<List> new_list(List items) {
  return adopt<List>(items.size() * sizeof(Value) + kValueOverhead, true, "a list",
                     [&] { return new List(std::move(items)); });
}

std::shared_ptr<Dict> new_dict() {
  return adopt<Dict>(kValueOverhead, true, "a dict", [] { return new Dict(); });
}

std::shared_ptr<const Callable> new_callable(Callable c) {
  return adopt<const Callable>(kValueOverhead, true, "a function",
                               [&] { return new Callable(std::move(c)); });
}

DepthGuard::DepthGuard(const char* what) {
  const int limit = t_current ? t_current->limits().max_value_depth : kDefaultMaxDepth;
  if (t_depth >= limit) {
    throw LimitError(std::string(what) + ": value nested deeper than max_value_depth (" +
                     std::to_string(limit) + ")");
  }
  ++t_depth;
}
DepthGuard::~DepthGuard() { --t_depth; }

int64_t live_containers() { return g_live_containers.load(std::memory_order_relaxed); }

}  // namespace hubzoo::jinja
