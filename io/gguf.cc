#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "base/error.h"
#include "io/mapped_file.h"

namespace hubzoo {

namespace fs = std::filesystem;

namespace {

// Metadata value types (gguf.h in ggml, GGUFValueType in gguf-py).
enum ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
  kValueTypeCount = 13,
};

constexpr std::string_view kValueTypeNames[kValueTypeCount] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

// The fewest bytes a value of each type takes in the file (a string: its u64
// length; an array: element type and count), to bound counts before reserving.
constexpr uint64_t kMinValueBytes[kValueTypeCount] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};

// Fixed part of the header: magic, version, tensor count, metadata count.
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
// Fewest bytes of one metadata pair (key length, type, a u8) and one tensor
// info (name length, n_dims, type, offset).
constexpr uint64_t kMinPairBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
// Arrays of arrays (gguf-py writes them for nested lists): one level of
// nesting, so reading a value recurses at most twice.
constexpr int kMaxArrayDepth = 2;
// Charged per metadata value against Limits::max_metadata_bytes, beside a
// string's bytes: roughly what one JSON node costs in memory.
constexpr uint64_t kJsonNodeCost = 16;
// Keys longer than this are cut in error messages (a key may be 64 MB).
constexpr size_t kMaxShownKey = 200;

constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlBF16 = 30;

std::string value_type_name(uint32_t t) {
  return t < kValueTypeCount ? std::string(kValueTypeNames[t])
                             : "unknown type " + std::to_string(t);
}

// `key` cut to kMaxShownKey bytes at a UTF-8 boundary, for messages.
std::string shown(std::string_view key) {
  if (key.size() <= kMaxShownKey) return std::string(key);
  size_t n = kMaxShownKey;
  while (n > 0 && (static_cast<unsigned char>(key[n]) & 0xC0) == 0x80) --n;
  return std::string(key.substr(0, n)) + "...";
}

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
// Returns the byte offset of the first bad sequence, or npos.
size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // bounds of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// Reads the GGUF bytes front to back. Every read is bounds-checked; errors
// read "<where>: <context>: <what>: ...", the context naming the key or tensor.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& where)
      : data_(data), size_(size), where_(where) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  void set_context(std::string c) { context_ = std::move(c); }

  [[noreturn]] void fail(const std::string& msg) const {
    throw FormatError(where_ + ": " + (context_.empty() ? "" : context_ + ": ") + msg);
  }

  const uint8_t* take(uint64_t n, const char* what) {
    if (n > left()) {
      fail(std::string(what) + " at byte " + std::to_string(pos_) + " needs " + std::to_string(n) +
           " bytes but the file ends at byte " + std::to_string(size_) + " (truncated?)");
    }
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  uint64_t le(int bytes, const char* what) {
    const uint8_t* p = take(static_cast<uint64_t>(bytes), what);
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(le(4, what)); }
  uint64_t u64(const char* what) { return le(8, what); }

  // A u64 length, then that many bytes of UTF-8.
  std::string_view str(const char* what, uint64_t max_bytes) {
    const uint64_t n = u64(what);
    if (n > max_bytes) {
      fail(std::string(what) + " length " + std::to_string(n) + " exceeds the limit of " +
           std::to_string(max_bytes) + " bytes");
    }
    const std::string_view s(reinterpret_cast<const char*>(take(n, what)), n);
    const size_t bad = invalid_utf8_at(s);
    if (bad != std::string_view::npos) {
      fail(std::string(what) + " is not valid UTF-8 (byte " + std::to_string(bad) + " of " +
           std::to_string(n) + ")");
    }
    return s;
  }

  // Fails unless `count` items of at least `min_bytes` each fit in the bytes left.
  void check_fits(uint64_t count, uint64_t min_bytes, const std::string& what) const {
    if (count > left() / min_bytes) {
      fail(what + " " + std::to_string(count) + " needs at least " + std::to_string(min_bytes) +
           " bytes each but only " + std::to_string(left()) +
           " bytes are left (corrupt count or truncated file?)");
    }
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& where_;
  std::string context_;
};

// What a tensor's ggml type means for storage: a float dtype or a block type.
struct ElementType {
  std::optional<DType> dtype;
  std::optional<QuantType> quant;
  uint64_t block_elems = 1;
  uint64_t block_bytes = 0;
};

std::optional<ElementType> element_type(uint32_t ggml_type) {
  ElementType e;
  if (ggml_type == kGgmlF32) {
    e.dtype = DType::F32;
    e.block_bytes = 4;
  } else if (ggml_type == kGgmlF16) {
    e.dtype = DType::F16;
    e.block_bytes = 2;
  } else if (ggml_type == kGgmlBF16) {
    e.dtype = DType::BF16;
    e.block_bytes = 2;
  } else if (auto q = quant_type_from_ggml(ggml_type)) {
    e.quant = *q;
    e.block_elems = static_cast<uint64_t>(quant_traits(*q).block_elems);
    e.block_bytes = static_cast<uint64_t>(quant_traits(*q).block_bytes);
  } else {
    return std::nullopt;
  }
  return e;
}

std::string supported_types() {
  std::string s = "F32, F16, BF16";
  for (uint32_t id = 0; id < 64; ++id) {
    if (quant_type_from_ggml(id)) s += ", " + ggml_type_name(id);
  }
  return s;
}

}  // namespace

// Parses the header into a GgufFile; one method per section.
class GgufParser {
 public:
  GgufParser(GgufFile& f, const std::string& where, const GgufFile::Limits& limits)
      : f_(f), r_(f.bytes_, f.size_, where), limits_(limits) {}

  void run() {
    const auto [n_tensors, n_pairs] = header();
    for (uint64_t i = 0; i < n_pairs; ++i) pair(i);
    r_.set_context("");
    check_alignment();
    f_.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) tensor_info(i);
    r_.set_context("");
    layout();
  }

 private:
  std::pair<uint64_t, uint64_t> header();
  void pair(uint64_t i);
  nlohmann::ordered_json value(uint32_t type, int depth);
  nlohmann::ordered_json array(int depth);
  void charge(uint64_t bytes);
  void check_alignment();
  void tensor_info(uint64_t i);
  void tensor_size(GgufTensorInfo& t, const std::vector<uint64_t>& ne);
  void layout();

  GgufFile& f_;
  Reader r_;
  const GgufFile::Limits& limits_;
  std::unordered_set<std::string_view> keys_;  // views into the file's bytes
  uint64_t metadata_bytes_ = 0;
  std::optional<uint32_t> alignment_type_;  // value type of general.alignment, if present
};

std::pair<uint64_t, uint64_t> GgufParser::header() {
  const uint8_t* m = r_.take(4, "magic");
  if (std::memcmp(m, "GGUF", 4) != 0) {
    std::string printable;
    for (int i = 0; i < 4; ++i) printable += (m[i] >= 0x20 && m[i] < 0x7f) ? char(m[i]) : '?';
    r_.fail("not a GGUF file: magic is '" + printable + "', expected 'GGUF'");
  }
  f_.version_ = r_.u32("version");
  if (f_.version_ != 2 && f_.version_ != 3) {
    if (f_.version_ != 0 && (f_.version_ & 0xFFFF) == 0) {
      r_.fail("GGUF version " + std::to_string(f_.version_) +
              " looks byte-swapped: big-endian GGUF files are not supported");
    }
    r_.fail("GGUF version " + std::to_string(f_.version_) + " is not supported (2 and 3 are)");
  }
  const uint64_t n_tensors = r_.u64("tensor count");
  const uint64_t n_pairs = r_.u64("metadata count");
  if (n_tensors > limits_.max_tensors) {
    r_.fail("tensor count " + std::to_string(n_tensors) + " exceeds the limit of " +
            std::to_string(limits_.max_tensors));
  }
  if (n_pairs > limits_.max_metadata) {
    r_.fail("metadata count " + std::to_string(n_pairs) + " exceeds the limit of " +
            std::to_string(limits_.max_metadata));
  }
  r_.check_fits(n_tensors, kMinTensorInfoBytes, "tensor count");
  r_.check_fits(n_pairs, kMinPairBytes, "metadata count");
  // Both sections together (each is bounded by the file size, so no overflow).
  if (n_tensors * kMinTensorInfoBytes + n_pairs * kMinPairBytes > r_.left()) {
    r_.fail("tensor count " + std::to_string(n_tensors) + " and metadata count " +
            std::to_string(n_pairs) + " do not fit in the " + std::to_string(r_.left()) +
            " bytes left (corrupt count?)");
  }
  return {n_tensors, n_pairs};
}

void GgufParser::charge(uint64_t bytes) {
  if (bytes > limits_.max_metadata_bytes - std::min(metadata_bytes_, limits_.max_metadata_bytes)) {
    r_.fail("metadata exceeds the limit of " + std::to_string(limits_.max_metadata_bytes) +
            " bytes");
  }
  metadata_bytes_ += bytes;
}

void GgufParser::pair(uint64_t i) {
  r_.set_context("metadata pair " + std::to_string(i));
  const std::string_view key = r_.str("key", limits_.max_string_bytes);
  r_.set_context("metadata '" + shown(key) + "'");
  if (!keys_.insert(key).second) r_.fail("duplicate key");
  charge(key.size() + kJsonNodeCost);
  const uint32_t type = r_.u32("value type");
  if (type >= kValueTypeCount) {
    r_.fail("unknown value type " + std::to_string(type) + " (known: 0..12)");
  }
  if (key == "general.alignment") alignment_type_ = type;
  nlohmann::ordered_json v = value(type, 0);
  // ordered_json's operator[] searches linearly; keys are unique (checked above).
  f_.metadata_.get_ref<nlohmann::ordered_json::object_t&>().emplace_back(std::string(key),
                                                                         std::move(v));
}

nlohmann::ordered_json GgufParser::value(uint32_t type, int depth) {
  switch (type) {
    case kU8:
      return r_.le(1, "u8 value");
    case kI8:
      return static_cast<int8_t>(r_.le(1, "i8 value"));
    case kU16:
      return r_.le(2, "u16 value");
    case kI16:
      return static_cast<int16_t>(r_.le(2, "i16 value"));
    case kU32:
      return r_.le(4, "u32 value");
    case kI32:
      return static_cast<int32_t>(r_.le(4, "i32 value"));
    case kU64:
      return r_.le(8, "u64 value");
    case kI64:
      return static_cast<int64_t>(r_.le(8, "i64 value"));
    case kF32: {
      const auto bits = static_cast<uint32_t>(r_.le(4, "f32 value"));
      float x;
      std::memcpy(&x, &bits, 4);
      return static_cast<double>(x);
    }
    case kF64: {
      const uint64_t bits = r_.le(8, "f64 value");
      double x;
      std::memcpy(&x, &bits, 8);
      return x;
    }
    case kBool: {
      const uint64_t b = r_.le(1, "bool value");
      if (b > 1) r_.fail("bool value " + std::to_string(b) + " is neither 0 nor 1");
      return b == 1;
    }
    case kString: {
      const std::string_view s = r_.str("string", limits_.max_string_bytes);
      charge(s.size());
      return std::string(s);
    }
    case kArray:
      return array(depth + 1);
    default:
      r_.fail("unknown value type " + std::to_string(type) + " (known: 0..12)");
  }
}

nlohmann::ordered_json GgufParser::array(int depth) {
  const uint32_t type = r_.u32("array element type");
  if (type >= kValueTypeCount) {
    r_.fail("unknown array element type " + std::to_string(type) + " (known: 0..12)");
  }
  if (type == kArray && depth >= kMaxArrayDepth) {
    r_.fail("arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
  }
  const uint64_t n = r_.u64("array length");
  if (n > limits_.max_array_elems) {
    r_.fail("array length " + std::to_string(n) + " exceeds the limit of " +
            std::to_string(limits_.max_array_elems));
  }
  r_.check_fits(n, kMinValueBytes[type], "array of " + value_type_name(type) + ": length");
  charge(n * kJsonNodeCost);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  auto& elems = out.get_ref<nlohmann::ordered_json::array_t&>();
  elems.reserve(n);
  for (uint64_t i = 0; i < n; ++i) elems.push_back(value(type, depth));
  return out;
}

void GgufParser::check_alignment() {
  if (!alignment_type_) return;
  r_.set_context("metadata 'general.alignment'");
  if (*alignment_type_ != kU32) r_.fail("must be a u32, got " + value_type_name(*alignment_type_));
  const auto a = f_.metadata_["general.alignment"].get<uint32_t>();
  if (a == 0 || (a & (a - 1)) != 0) r_.fail(std::to_string(a) + " is not a power of two");
  f_.alignment_ = a;
}

void GgufParser::tensor_info(uint64_t i) {
  r_.set_context("tensor " + std::to_string(i));
  GgufTensorInfo t;
  t.name = std::string(r_.str("name", limits_.max_name_bytes));
  r_.set_context("tensor '" + t.name + "'");
  if (!f_.index_.emplace(t.name, f_.tensors_.size()).second) r_.fail("duplicate tensor name");
  const uint32_t n_dims = r_.u32("n_dims");
  if (n_dims > limits_.max_dims) {
    r_.fail("n_dims " + std::to_string(n_dims) + " exceeds " + std::to_string(limits_.max_dims));
  }
  std::vector<uint64_t> ne(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    ne[d] = r_.u64("ne");
    if (ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      r_.fail("ne[" + std::to_string(d) + "] = " + std::to_string(ne[d]) + " is over 2^63 - 1");
    }
  }
  t.ggml_type = r_.u32("type");
  t.offset = r_.u64("offset");
  tensor_size(t, ne);
  if (t.offset % f_.alignment_ != 0) {
    r_.fail("offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
            std::to_string(f_.alignment_));
  }
  f_.tensors_.push_back(std::move(t));
}

// Sets dtype/quant, shape (ne reversed) and nbytes, checking every product.
void GgufParser::tensor_size(GgufTensorInfo& t, const std::vector<uint64_t>& ne) {
  const auto et = element_type(t.ggml_type);
  if (!et) {
    r_.fail("type " + ggml_type_name(t.ggml_type) + " (GGML id " + std::to_string(t.ggml_type) +
            ") is not supported; supported: " + supported_types());
  }
  t.dtype = et->dtype;
  t.quant = et->quant;
  std::string ne_str = "[";
  for (size_t d = 0; d < ne.size(); ++d) ne_str += (d ? ", " : "") + std::to_string(ne[d]);
  ne_str += "]";
  // Element count: the non-zero dims must multiply within int64 even if
  // another dim is 0, so that no product over the shape ever overflows.
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t numel = 1, nonzero = 1;
  for (const uint64_t x : ne) {
    numel *= x;
    if (x == 0) continue;
    if (nonzero > kMax / x) r_.fail("element count of ne " + ne_str + " overflows int64");
    nonzero *= x;
  }
  const uint64_t ne0 = ne.empty() ? 1 : ne[0];
  if (ne0 % et->block_elems != 0) {
    r_.fail("ne[0] = " + std::to_string(ne0) + " is not a multiple of the " +
            ggml_type_name(t.ggml_type) + " block size " + std::to_string(et->block_elems));
  }
  const uint64_t blocks = numel / et->block_elems;
  if (blocks > kMax / et->block_bytes) {
    r_.fail("byte size of ne " + ne_str + " as " + ggml_type_name(t.ggml_type) +
            " overflows int64");
  }
  t.nbytes = blocks * et->block_bytes;
  for (auto it = ne.rbegin(); it != ne.rend(); ++it) t.shape.push_back(static_cast<int64_t>(*it));
}

// Places the data section and checks every tensor's bytes lie inside it,
// without overlaps.
void GgufParser::layout() {
  const uint64_t a = f_.alignment_;
  const uint64_t start = (r_.pos() + a - 1) / a * a;
  const uint64_t size = f_.size_;
  const uint64_t data_size = size > start ? size - start : 0;
  f_.data_offset_ = start;
  f_.data_ = f_.bytes_ + std::min(start, size);
  for (const auto& t : f_.tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      r_.fail("tensor '" + t.name + "': " + std::to_string(t.nbytes) + " bytes at offset " +
              std::to_string(t.offset) + " are past the end of the data section (" +
              std::to_string(data_size) + " bytes from file offset " + std::to_string(start) +
              "; file truncated?)");
    }
  }
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : f_.tensors_) {
    if (t.nbytes > 0) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const auto* x, const auto* y) { return x->offset < y->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes) {
      r_.fail("tensors '" + order[i - 1]->name + "' and '" + order[i]->name +
              "' overlap in the data section");
    }
  }
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size,
                                          const std::string& where, const Limits& limits) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = where;
  f->bytes_ = data;
  f->size_ = size;
  f->metadata_ = nlohmann::ordered_json::object();
  GgufParser(*f, where, limits).run();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::open(const fs::path& path, const Limits& limits) {
  const std::string p = path.string();
  const FileMapping m = map_regular_file(
      path, kHeaderBytes, std::to_string(kHeaderBytes) + "-byte GGUF header (truncated?)");
  std::unique_ptr<GgufFile> f(new GgufFile());
  // From here the destructor unmaps on any throw.
  f->map_ = m.data;
  f->map_size_ = m.size;
  f->path_ = path;
  f->bytes_ = f->map_;
  f->size_ = m.size;
  f->metadata_ = nlohmann::ordered_json::object();
  GgufParser(*f, p, limits).run();
  return f;
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

const GgufTensorInfo* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* GgufFile::data(const GgufTensorInfo& t) const { return data_ + t.offset; }

void GgufFile::drop_metadata() {
  nlohmann::ordered_json::object().swap(metadata_);
  // The header's pages (keys, values, tensor infos) were read once, by the
  // parse; everything in them is copied out. Gemma 3's is 6.5 MB, 2% of its
  // file, that would otherwise stay resident for the model's lifetime.
  release_pages(map_, data_);
}

void GgufFile::release(const GgufTensorInfo& t) const {
  release_pages(data_ + t.offset, data_ + t.offset + t.nbytes);
}

void GgufFile::release(const GgufTensorInfo& t, uint64_t from, uint64_t to) const {
  to = std::min<uint64_t>(to, t.nbytes);
  if (!map_ || from >= to) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(data_ + t.offset);
  // From the page holding `from`, but not below the tensor's first whole page.
  const uintptr_t lo = std::max((first + from) / page * page, (first + page - 1) / page * page);
  release_pages(reinterpret_cast<const uint8_t*>(lo), data_ + t.offset + to);
}

void GgufFile::release_pages(const uint8_t* begin, const uint8_t* end) const {
  if (!map_) return;  // parsed from the caller's memory: not ours to drop
  release_whole_pages(begin, end);
}

}  // namespace hubzoo
