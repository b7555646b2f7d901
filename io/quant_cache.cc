#include "io/quant_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <vector>

#include "base/error.h"
#include "io/mapped_file.h"

// Header-only: nothing to link (libxxhash-dev, docs/dependencies.md).
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace hubzoo {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'H', 'Z', 'Q', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormatVersion = 1;

// The start of an entry's file (the rest of its kQuantCacheHeaderBytes is zeros).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t type;
  int64_t n, k, row_bytes;
  uint64_t payload_bytes;
  uint64_t key_lo, key_hi;
  uint64_t checksum;  // XXH3-64 of the rows
};
static_assert(sizeof(Header) <= kQuantCacheHeaderBytes);

Header make_header(const QuantCacheKey& key, const QuantCacheShape& shape, uint64_t checksum) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kFormatVersion;
  h.type = static_cast<uint32_t>(shape.type);
  h.n = shape.n;
  h.k = shape.k;
  h.row_bytes = shape.row_bytes;
  h.payload_bytes = shape.bytes();
  h.key_lo = key.lo;
  h.key_hi = key.hi;
  h.checksum = checksum;
  return h;
}

// Whether the header found is the one store() writes for this key and shape
// (every field but the checksum, which the caller checks against the rows).
bool header_matches(const Header& found, const QuantCacheKey& key, const QuantCacheShape& shape) {
  const Header want = make_header(key, shape, found.checksum);
  return std::memcmp(&found, &want, sizeof(Header)) == 0;
}

struct Mapping {
  void* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base) ::munmap(base, size);
  }
};

// The entry in `path` if its header and size say `shape` under `key` (and,
// with verify, its rows pass their checksum); otherwise nothing.
std::optional<QuantCacheEntry> open_entry(const fs::path& path, const QuantCacheKey& key,
                                          const QuantCacheShape& shape, bool verify) {
  FileMapping file;
  try {
    file = map_regular_file(path, kQuantCacheHeaderBytes, "quant cache header");
  } catch (const Error&) {  // absent, not a regular file, too short: a miss
    return std::nullopt;
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->base = const_cast<uint8_t*>(file.data);
  mapping->size = file.size;
  Header h;
  std::memcpy(&h, file.data, sizeof(h));
  if (!header_matches(h, key, shape) || file.size - kQuantCacheHeaderBytes != shape.bytes()) {
    return std::nullopt;
  }
  const uint8_t* rows = file.data + kQuantCacheHeaderBytes;
  if (verify && XXH3_64bits(rows, shape.bytes()) != h.checksum) return std::nullopt;
  return QuantCacheEntry{std::shared_ptr<const uint8_t>(mapping, rows), shape.bytes()};
}

bool write_all(int fd, const uint8_t* p, uint64_t bytes) {
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, uint64_t{1} << 30));
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    bytes -= static_cast<uint64_t>(w);
  }
  return true;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(what + ": '" + text.substr(0, 64) + "' " + why +
                           " (a byte count, optionally with K, M, G or T)");
  };
  size_t i = 0;
  uint64_t value = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) throw bad("is too large");
    value = value * 10 + digit;
  }
  if (i == 0) throw bad("is not a size");
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!unit.empty() && unit != "b") {
    const std::string prefixes = "kmgt";
    const size_t at = prefixes.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (at == std::string::npos || !(rest.empty() || rest == "b" || rest == "ib")) {
      throw bad("has an unknown unit");
    }
    shift = 10 * static_cast<int>(at + 1);
  }
  if (value > ((uint64_t{1} << 63) >> shift)) throw bad("is too large");
  return value << shift;
}

std::string QuantCacheKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

QuantCacheKey quant_cache_key(uint32_t revision, QuantType t, int64_t n, int64_t k,
                              const QuantCacheSource& source) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  const auto add = [&](const void* p, size_t bytes) { XXH3_128bits_update(&state, p, bytes); };
  const char tag[] = "hubzoo quantize-on-load v1";
  add(tag, sizeof(tag));
  // Fixed-width fields, each in its place: no two sources hash the same stream.
  const uint32_t type = static_cast<uint32_t>(t), dtype = static_cast<uint32_t>(source.dtype);
  const int32_t quant = source.quant ? static_cast<int32_t>(*source.quant) : -1;
  const uint64_t rows = source.row_order ? source.row_order->size() : 0;
  add(&revision, sizeof(revision));
  add(&type, sizeof(type));
  add(&n, sizeof(n));
  add(&k, sizeof(k));
  add(&dtype, sizeof(dtype));
  add(&quant, sizeof(quant));
  add(&source.add, sizeof(source.add));
  add(&rows, sizeof(rows));
  add(&source.bytes, sizeof(source.bytes));
  if (rows > 0) add(source.row_order->data(), rows * sizeof(int64_t));
  if (source.bytes > 0) add(source.data, static_cast<size_t>(source.bytes));
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return {h.low64, h.high64};
}

void QuantCacheEntry::release(uint64_t from, uint64_t to) const {
  release_whole_pages(rows.get() + std::min(from, bytes), rows.get() + std::min(to, bytes));
}

QuantCache QuantCache::from_env() {
  const std::string set = env("HUBZOO_QUANT_CACHE");
  if (set == "0" || set == "off") return QuantCache();
  const std::string max = env("HUBZOO_QUANT_CACHE_MAX");
  const uint64_t max_bytes =
      max.empty() ? kQuantCacheDefaultMaxBytes : parse_byte_size(max, "HUBZOO_QUANT_CACHE_MAX");
  if (!set.empty()) return QuantCache(set, max_bytes);
  if (const std::string root = env("HUBZOO_CACHE"); !root.empty()) {
    return QuantCache(fs::path(root) / "quantized", max_bytes);
  }
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    return QuantCache(fs::path(xdg) / "hubzoo" / "quantized", max_bytes);
  }
  if (const std::string home = env("HOME"); !home.empty()) {
    return QuantCache(fs::path(home) / ".cache" / "hubzoo" / "quantized", max_bytes);
  }
  return QuantCache();
}

fs::path QuantCache::path_of(const QuantCacheKey& key) const { return dir_ / (key.hex() + ".hzq"); }

std::optional<QuantCacheEntry> QuantCache::find(const QuantCacheKey& key,
                                                const QuantCacheShape& shape) const {
  if (!enabled()) return std::nullopt;
  const fs::path path = path_of(key);
  std::optional<QuantCacheEntry> found = open_entry(path, key, shape, /*verify=*/true);
  // Used now: the last to go when the directory passes its bound (a cache
  // on a read-only place keeps its old time, and still hits).
  if (found) ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return found;
}

std::optional<QuantCacheEntry> QuantCache::store(const QuantCacheKey& key,
                                                 const QuantCacheShape& shape,
                                                 const uint8_t* rows) const {
  if (!enabled() || (shape.bytes() > 0 && !rows)) return std::nullopt;
  const uint64_t file_bytes = kQuantCacheHeaderBytes + shape.bytes();
  if (max_bytes_ > 0 && file_bytes > max_bytes_) return std::nullopt;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return std::nullopt;
  std::string tmp = (dir_ / (key.hex() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return std::nullopt;
  std::vector<uint8_t> header(kQuantCacheHeaderBytes, 0);
  const Header h = make_header(key, shape, XXH3_64bits(rows, shape.bytes()));
  std::memcpy(header.data(), &h, sizeof(h));
  bool ok = write_all(fd, header.data(), header.size()) && write_all(fd, rows, shape.bytes());
  ok = ::close(fd) == 0 && ok;
  const fs::path final_path = path_of(key);
  if (!ok || ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return std::nullopt;
  }
  evict_for(file_bytes, final_path);
  // What was just written (or, where another process renamed its own copy
  // of this key over it since, that one: the same bytes by the key).
  return open_entry(final_path, key, shape, /*verify=*/false);
}

void QuantCache::evict_for(uint64_t incoming, const fs::path& keep) const {
  if (max_bytes_ == 0) return;
  const std::lock_guard<std::mutex> lock(usage_->mu);
  if (usage_->listed) {
    usage_->bytes += incoming;
    if (usage_->bytes <= max_bytes_) return;
  }
  struct Item {
    fs::file_time_type time;
    fs::path path;
    uint64_t bytes;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  const fs::file_time_type stale = fs::file_time_type::clock::now() - std::chrono::hours(24);
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code entry_ec;  // an entry that vanished or cannot be read is skipped
    if (!it->is_regular_file(entry_ec) || it->is_symlink(entry_ec)) continue;
    const fs::file_time_type time = it->last_write_time(entry_ec);
    if (entry_ec) continue;
    const uint64_t bytes = it->file_size(entry_ec);
    if (entry_ec) continue;
    const fs::path& path = it->path();
    if (path.filename().string().find(".tmp.") != std::string::npos) {
      if (time < stale) fs::remove(path, entry_ec);  // a store that never finished
      continue;
    }
    if (path.extension() != ".hzq") continue;
    total += bytes;
    if (path != keep) items.push_back({time, path, bytes});
  }
  if (total > max_bytes_) {
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return a.time != b.time ? a.time < b.time : a.path < b.path;
    });
    const uint64_t target = max_bytes_ - max_bytes_ / 8;
    for (const Item& item : items) {
      if (total <= target) break;
      std::error_code remove_ec;
      if (fs::remove(item.path, remove_ec)) total -= item.bytes;
    }
  }
  usage_->listed = true;
  usage_->bytes = total;
}

}  // namespace hubzoo
