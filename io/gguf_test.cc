#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/error.h"
#include "base/test_util.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;
using test_util::expect_error;
using test_util::TempDir;

// ---- a tiny GGUF writer --------------------------------------------------------

std::string le(uint64_t v, int bytes) {
  std::string s(static_cast<size_t>(bytes), '\0');
  for (int i = 0; i < bytes; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}
std::string le32(uint64_t v) { return le(v, 4); }
std::string le64(uint64_t v) { return le(v, 8); }
std::string gstr(const std::string& s) { return le64(s.size()) + s; }

// Value types (GGUF spec).
enum : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

// A metadata value as stored: u32 type, then the payload.
std::string val(uint32_t type, const std::string& payload) { return le32(type) + payload; }
std::string val_u32(uint32_t x) { return val(U32, le32(x)); }
std::string val_str(const std::string& s) { return val(STRING, gstr(s)); }
std::string val_f32(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return val(F32, le32(b));
}
std::string val_f64(double x) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  return val(F64, le64(b));
}
// An array: element type, count, the elements' payloads (no type each).
std::string val_arr(uint32_t elem, uint64_t n, const std::string& payloads) {
  return val(ARRAY, le32(elem) + le64(n) + payloads);
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;                       // innermost first
  uint32_t type = 0;                              // GGML id
  std::optional<uint64_t> offset = std::nullopt;  // default: packed after the previous one
};

// Bytes per tensor for the GGML types these tests use.
uint64_t tensor_bytes(const TensorSpec& t) {
  uint64_t n = 1;
  for (auto x : t.ne) n *= x;
  switch (t.type) {
    case 0:
      return n * 4;  // F32
    case 1:
    case 30:
      return n * 2;  // F16, BF16
    case 8:
      return n / 32 * 34;  // Q8_0
    case 12:
      return n / 256 * 144;  // Q4_K
    default:
      return n;  // tests of bad types: anything
  }
}

struct GgufSpec {
  uint32_t version = 3;
  std::vector<std::pair<std::string, std::string>> kv;  // key, val(...)
  std::vector<TensorSpec> tensors;
  uint64_t alignment = 32;                  // for padding (the key is the test's to write)
  std::optional<uint64_t> n_tensors, n_kv;  // count overrides
  static constexpr uint64_t kMaxData = 1 << 20;

  // Header, metadata, infos, padding, data (byte k of tensor i is 7k + i);
  // no padding after the last tensor, so any shorter prefix is truncated.
  std::string build() const {
    std::string out = "GGUF" + le32(version) + le64(n_tensors.value_or(tensors.size())) +
                      le64(n_kv.value_or(kv.size()));
    for (const auto& [k, v] : kv) out += gstr(k) + v;
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      next = (off + tensor_bytes(t) + alignment - 1) / alignment * alignment;
      out += gstr(t.name) + le32(t.ne.size());
      for (auto x : t.ne) out += le64(x);
      out += le32(t.type) + le64(off);
    }
    out.append((alignment - out.size() % alignment) % alignment, '\0');
    const size_t start = out.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const uint64_t n = tensor_bytes(tensors[i]);
      if (offsets[i] > kMaxData || n > kMaxData) continue;  // bad-input tests: no data
      if (out.size() < start + offsets[i] + n) out.resize(start + offsets[i] + n, '\0');
      for (uint64_t k = 0; k < n; ++k) out[start + offsets[i] + k] = static_cast<char>(7 * k + i);
    }
    return out;
  }
};

std::unique_ptr<GgufFile> parse(const std::string& bytes,
                                const GgufFile::Limits& limits = GgufFile::Limits{}) {
  return GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "model.gguf",
                         limits);
}

// Expects parsing to fail with a FormatError naming the file and every part.
void expect_bad(const std::string& bytes, std::initializer_list<std::string> parts) {
  SCOPED_TRACE(*parts.begin());
  expect_error<FormatError>([&] { parse(bytes); }, {"model.gguf: "});
  expect_error<FormatError>([&] { parse(bytes); }, parts);
}

// A small valid file: two keys and an F32 tensor.
GgufSpec small_spec() {
  GgufSpec s;
  s.kv = {{"general.architecture", val_str("llama")}, {"llama.block_count", val_u32(2)}};
  s.tensors = {{"w", {4, 2}, 0}, {"b", {4}, 0}};
  return s;
}

// The header of a file with these counts, for hand-made bodies.
std::string head(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  return "GGUF" + le32(version) + le64(n_tensors) + le64(n_kv);
}

// ---- valid files ---------------------------------------------------------------

GgufSpec every_value_spec(uint32_t version, uint32_t alignment) {
  GgufSpec s;
  s.version = version;
  s.alignment = alignment;
  s.kv = {
      {"general.alignment", val_u32(alignment)},
      {"u8", val(U8, le(200, 1))},
      {"i8", val(I8, le(static_cast<uint8_t>(-5), 1))},
      {"u16", val(U16, le(60000, 2))},
      {"i16", val(I16, le(static_cast<uint16_t>(-300), 2))},
      {"u32", val_u32(4000000000u)},
      {"i32", val(I32, le(static_cast<uint32_t>(-70000), 4))},
      {"f32", val_f32(0.5f)},
      {"bool", val(BOOL, le(1, 1))},
      {"string", val_str("h\xC3\xA9llo")},
      {"u64", val(U64, le64(~0ull))},
      {"i64", val(I64, le64(static_cast<uint64_t>(-5000000000ll)))},
      {"f64", val_f64(-2.25)},
      {"tokens", val_arr(STRING, 3, gstr("a") + gstr("") + gstr("\xE2\x82\xAC"))},
      {"scores", val_arr(F32, 2, le32(0x3f800000) + le32(0xc0000000))},
      {"empty", val_arr(I32, 0, "")},
      {"nested",
       val_arr(ARRAY, 2,
               le32(U8) + le64(2) + "\x01\x02" + le32(BOOL) + le64(1) + std::string(1, '\0'))},
  };
  s.tensors = {{"f32", {4, 3}, 0},   {"f16", {8}, 1},           {"bf16", {2, 2, 2}, 30},
               {"q8_0", {64, 2}, 8}, {"q4_k", {256, 1, 2}, 12}, {"scalar", {}, 0}};
  return s;
}

nlohmann::ordered_json every_value_json(uint32_t alignment) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["general.alignment"] = alignment;
  j["u8"] = 200;
  j["i8"] = -5;
  j["u16"] = 60000;
  j["i16"] = -300;
  j["u32"] = 4000000000u;
  j["i32"] = -70000;
  j["f32"] = 0.5;
  j["bool"] = true;
  j["string"] = "h\xC3\xA9llo";
  j["u64"] = ~0ull;
  j["i64"] = -5000000000ll;
  j["f64"] = -2.25;
  j["tokens"] = {"a", "", "\xE2\x82\xAC"};
  j["scores"] = {1.0, -2.0};
  j["empty"] = nlohmann::ordered_json::array();
  j["nested"] = {nlohmann::ordered_json::array({1, 2}), nlohmann::ordered_json::array({false})};
  return j;
}

TEST(Gguf, RoundTripsEveryValueTypeAndTensorType) {
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t alignment : {32u, 64u}) {
      SCOPED_TRACE("v" + std::to_string(version) + " align " + std::to_string(alignment));
      const GgufSpec spec = every_value_spec(version, alignment);
      const std::string bytes = spec.build();
      const auto f = parse(bytes);
      EXPECT_EQ(f->version(), version);
      EXPECT_EQ(f->alignment(), alignment);
      EXPECT_EQ(f->data_offset() % alignment, 0u);
      EXPECT_EQ(f->metadata(), every_value_json(alignment)) << f->metadata().dump();
      EXPECT_TRUE(f->metadata()["u64"].is_number_unsigned());
      EXPECT_TRUE(f->metadata()["i8"].is_number_integer());

      ASSERT_EQ(f->tensors().size(), spec.tensors.size());
      const std::vector<Shape> shapes = {{3, 4}, {8}, {2, 2, 2}, {2, 64}, {2, 1, 256}, {}};
      const std::vector<uint64_t> nbytes = {48, 16, 16, 136, 288, 4};
      for (size_t i = 0; i < spec.tensors.size(); ++i) {
        const GgufTensorInfo& t = f->tensors()[i];
        EXPECT_EQ(t.name, spec.tensors[i].name);
        EXPECT_EQ(t.ggml_type, spec.tensors[i].type);
        EXPECT_EQ(t.shape, shapes[i]) << t.name;
        EXPECT_EQ(t.nbytes, nbytes[i]) << t.name;
        EXPECT_EQ(t.offset % alignment, 0u);
        EXPECT_EQ(f->find(t.name), &t);
        const uint8_t* d = f->data(t);
        EXPECT_EQ(d, reinterpret_cast<const uint8_t*>(bytes.data()) + f->data_offset() + t.offset);
        for (uint64_t k = 0; k < t.nbytes; ++k) ASSERT_EQ(d[k], static_cast<uint8_t>(7 * k + i));
      }
      EXPECT_EQ(f->tensors()[0].dtype, DType::F32);
      EXPECT_EQ(f->tensors()[1].dtype, DType::F16);
      EXPECT_EQ(f->tensors()[2].dtype, DType::BF16);
      EXPECT_EQ(f->tensors()[3].quant, QuantType::Q8_0);
      EXPECT_EQ(f->tensors()[4].quant, QuantType::Q4_K);
      EXPECT_FALSE(f->tensors()[0].quant.has_value());
      EXPECT_FALSE(f->tensors()[3].dtype.has_value());
      EXPECT_EQ(f->find("missing"), nullptr);
    }
  }
}

TEST(Gguf, OpensAFileAndReleasesTensorPages) {
  TempDir dir;
  const std::string bytes = every_value_spec(3, 64).build();
  const fs::path p = dir / "model.gguf";
  std::ofstream(p, std::ios::binary) << bytes;
  const auto f = GgufFile::open(p);
  EXPECT_EQ(f->path(), p);
  EXPECT_EQ(f->metadata(), every_value_json(64));
  const GgufTensorInfo* q = f->find("q8_0");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(std::memcmp(f->data(*q), bytes.data() + f->data_offset() + q->offset, q->nbytes), 0);
  for (const auto& t : f->tensors()) f->release(t);
  // Released pages of a private read-only mapping read back from the file.
  EXPECT_EQ(std::memcmp(f->data(*q), bytes.data() + f->data_offset() + q->offset, q->nbytes), 0);
  // Dropping the metadata (once a loader has read it) keeps the tensors.
  f->drop_metadata();
  EXPECT_EQ(f->metadata(), nlohmann::ordered_json::object());
  ASSERT_EQ(f->find("q8_0"), q);
  EXPECT_EQ(std::memcmp(f->data(*q), bytes.data() + f->data_offset() + q->offset, q->nbytes), 0);
}

// Resident KiB of the mapping holding p (/proc/self/smaps), or -1.
int64_t mapping_rss_kb(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(' ') > line.find('-')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      return std::stoll(line.substr(4));
    }
  }
  return -1;
}

TEST(Gguf, DroppingTheMetadataReleasesTheHeaderPages) {
  TempDir dir;
  GgufSpec s = small_spec();
  s.kv.push_back({"tokenizer.chat_template", val_str(std::string(512 * 1024, 'x'))});
  const std::string bytes = s.build();
  std::ofstream(dir / "model.gguf", std::ios::binary) << bytes;
  const auto f = GgufFile::open(dir / "model.gguf");
  const GgufTensorInfo* w = f->find("w");
  ASSERT_NE(w, nullptr);
  const int64_t before = mapping_rss_kb(f->data(*w));
  ASSERT_GE(before, 512);  // the parse read the whole header
  f->drop_metadata();
  EXPECT_LE(mapping_rss_kb(f->data(*w)), before - 500);
  EXPECT_EQ(std::memcmp(f->data(*w), bytes.data() + f->data_offset() + w->offset, w->nbytes), 0);
}

// A tensor's pages released a range at a time as a loader reads them for the
// last time (attach_panels' `read`): the whole pages up to each `to`, from the
// page holding `from`.
TEST(Gguf, ReleasingARangeDropsItsWholePages) {
  TempDir dir;
  GgufSpec s = small_spec();
  s.tensors.push_back({"big", {256 * 1024}, 0});  // 1 MiB of F32 after "w" and "b"
  const std::string bytes = s.build();
  std::ofstream(dir / "model.gguf", std::ios::binary) << bytes;
  const auto f = GgufFile::open(dir / "model.gguf");
  const GgufTensorInfo* big = f->find("big");
  ASSERT_NE(big, nullptr);
  const auto expect_intact = [&] {
    for (const char* name : {"w", "b", "big"}) {
      const GgufTensorInfo* t = f->find(name);
      EXPECT_EQ(std::memcmp(f->data(*t), bytes.data() + f->data_offset() + t->offset, t->nbytes), 0)
          << name;
    }
  };
  expect_intact();  // every page of the mapping now resident
  const int64_t all = mapping_rss_kb(f->data(*big));
  ASSERT_GE(all, 1024);
  f->release(*big, 0, 300 * 1024);  // about the first 300 KiB
  f->release(*big, 300 * 1024, 700 * 1024);
  const int64_t after = mapping_rss_kb(f->data(*big));
  EXPECT_LE(after, all - 690);  // 700 KiB less at most one page either side
  EXPECT_GE(after, all - 704);
  f->release(*big, 700 * 1024, uint64_t{1} << 40);  // `to` past the end: up to the end
  EXPECT_LE(mapping_rss_kb(f->data(*big)), all - 1016);
  expect_intact();  // released pages of a private read-only mapping read back from the file
}

TEST(Gguf, FileErrors) {
  TempDir dir;
  expect_error<FileError>([&] { GgufFile::open(dir / "missing.gguf"); }, {"missing.gguf"});
  expect_error<FileError>([&] { GgufFile::open(dir.path()); }, {"not a regular file"});
  std::ofstream(dir / "short.gguf", std::ios::binary) << "GGUF";
  expect_error<FormatError>([&] { GgufFile::open(dir / "short.gguf"); },
                            {"short.gguf", "4 bytes", "header"});
}

TEST(Gguf, ZeroSizedTensors) {
  // ggml allows ne = 0 (non-negative dims); such a tensor has no bytes, and
  // overlaps nothing even where it sits at another tensor's offset.
  GgufSpec s = small_spec();
  s.tensors.push_back({"empty", {0, 4}, 0, 0});
  s.tensors.push_back({"empty_q", {0}, 8, 32});
  const auto f = parse(s.build());
  const GgufTensorInfo* e = f->find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (Shape{4, 0}));
  EXPECT_EQ(e->nbytes, 0u);
  EXPECT_EQ(f->find("empty_q")->nbytes, 0u);
}

TEST(Gguf, NoTensorsAndNoData) {
  GgufSpec s;
  s.kv = {{"k", val_str("v")}};
  const auto f = parse(s.build());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata()["k"], "v");
}

// ---- bad input -----------------------------------------------------------------

TEST(Gguf, EveryTruncationIsATypedError) {
  const std::string bytes = every_value_spec(3, 32).build();
  ASSERT_NO_THROW(parse(bytes));
  TempDir dir;
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string prefix = bytes.substr(0, n);
    SCOPED_TRACE(n);
    EXPECT_THROW(parse(prefix), FormatError);
    if (n % 17 == 0) {  // through open() too (a file per prefix is slow)
      const fs::path p = dir / "model.gguf";
      std::ofstream(p, std::ios::binary | std::ios::trunc) << prefix;
      EXPECT_THROW(GgufFile::open(p), FormatError);
    }
  }
  // Cut before the tensor infos the counts promise: caught by the count check.
  expect_bad(bytes.substr(0, 30), {"tensor count 6", "bytes are left"});
  // Cut inside the last tensor's name.
  const size_t name_at = bytes.find("scalar");
  expect_bad(bytes.substr(0, name_at + 3),
             {"tensor 5: name at byte " + std::to_string(name_at) + " needs 6 bytes",
              "file ends at byte " + std::to_string(name_at + 3), "truncated"});
  expect_bad(bytes.substr(0, bytes.size() - 1), {"tensor 'scalar'", "past the end"});
}

TEST(Gguf, WrongMagic) {
  std::string b = small_spec().build();
  b[0] = 'G', b[1] = 'G', b[2] = 'M', b[3] = 'L';
  expect_bad(b, {"not a GGUF file", "'GGML'"});
}

TEST(Gguf, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u}) {
    GgufSpec s = small_spec();
    s.version = v;
    expect_bad(s.build(), {"GGUF version " + std::to_string(v) + " is not supported"});
  }
  GgufSpec s = small_spec();
  s.version = 0x03000000;  // a big-endian v3 file read little-endian
  expect_bad(s.build(), {"byte-swapped"});
}

TEST(Gguf, AbsurdCounts) {
  GgufSpec s = small_spec();
  s.n_tensors = 1ull << 63;
  expect_bad(s.build(), {"tensor count 9223372036854775808 exceeds the limit"});
  s = small_spec();
  s.n_kv = 1ull << 40;
  expect_bad(s.build(), {"metadata count 1099511627776 exceeds the limit"});
  // Within the limits but more than the bytes left can hold.
  s = small_spec();
  s.n_tensors = 60000;
  expect_bad(s.build(), {"tensor count 60000", "bytes are left"});
  s = small_spec();
  s.n_kv = 60000;
  expect_bad(s.build(), {"metadata count 60000", "bytes are left"});
  // Each count fits the 30 bytes left alone (24 and 2 x 13), but not both together.
  expect_bad(head(1, 2) + std::string(30, '\0'),
             {"tensor count 1 and metadata count 2 do not fit in the 30 bytes left"});
}

TEST(Gguf, HugeStringLengths) {
  // A key of length 2^62.
  expect_bad(head(0, 1) + le64(1ull << 62) + std::string(64, 'x'),
             {"metadata pair 0", "key length 4611686018427387904 exceeds the limit"});
  // A string value of length 2^62.
  expect_bad(head(0, 1) + gstr("name") + le32(STRING) + le64(1ull << 62) + std::string(64, 'x'),
             {"metadata 'name'", "string length 4611686018427387904"});
  // Within the limit but past the end of the file.
  expect_bad(head(0, 1) + gstr("name") + le32(STRING) + le64(1000) + "abc",
             {"metadata 'name'", "string", "needs 1000 bytes", "truncated"});
}

TEST(Gguf, HugeArrayLengths) {
  expect_bad(head(0, 1) + gstr("tokens") + val_arr(STRING, 1ull << 62, ""),
             {"metadata 'tokens'", "array length 4611686018427387904 exceeds the limit"});
  expect_bad(head(0, 1) + gstr("tokens") + val_arr(STRING, 1000000, gstr("a")),
             {"metadata 'tokens'", "array of string: length 1000000", "bytes are left"});
  expect_bad(head(0, 1) + gstr("ids") + val_arr(U64, 10, le64(1)),
             {"metadata 'ids'", "array of u64: length 10"});
}

TEST(Gguf, UnknownValueTypes) {
  expect_bad(head(0, 1) + gstr("odd.key") + le32(13) + le64(0),
             {"metadata 'odd.key'", "unknown value type 13"});
  expect_bad(head(0, 1) + gstr("odd.arr") + val_arr(99, 1, le64(0)),
             {"metadata 'odd.arr'", "unknown array element type 99"});
}

TEST(Gguf, ArraysNestedTooDeep) {
  // [[[1]]]: three levels.
  const std::string inner = le32(U8) + le64(1) + "\x01";
  const std::string mid = le32(ARRAY) + le64(1) + inner;
  expect_bad(head(0, 1) + gstr("deep") + val_arr(ARRAY, 1, mid),
             {"metadata 'deep'", "nested more than 2 deep"});
}

TEST(Gguf, InvalidUtf8) {
  expect_bad(head(0, 1) + gstr("k") + val_str("ab\xC3("), {"metadata 'k'", "not valid UTF-8"});
  expect_bad(head(0, 1) + gstr("k") + val_str("\xED\xA0\x80"), {"not valid UTF-8"});  // surrogate
  expect_bad(head(0, 1) + gstr("k") + val_str("\xC0\xAF"), {"not valid UTF-8"});      // overlong
  expect_bad(head(0, 1) + gstr("k\xFF") + val_u32(1), {"metadata pair 0", "key is not valid"});
  expect_bad(head(0, 1) + gstr("k") + val_arr(STRING, 2, gstr("ok") + gstr("\x80")),
             {"metadata 'k'", "string is not valid UTF-8"});
  GgufSpec s = small_spec();
  s.tensors[0].name = "w\xF5";
  expect_bad(s.build(), {"tensor 0", "name is not valid UTF-8"});
}

TEST(Gguf, LongKeysAreCutInMessages) {
  // 300 x "é": the cut at 200 bytes falls on a character boundary.
  std::string key;
  for (int i = 0; i < 300; ++i) key += "\xC3\xA9";
  try {
    parse(head(0, 1) + gstr(key) + le32(99));
    ADD_FAILURE() << "expected a FormatError";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("metadata '" + key.substr(0, 200) + "...': unknown value type 99"),
              std::string::npos)
        << msg;
    EXPECT_LT(msg.size(), 300u);
  }
}

TEST(Gguf, BadBool) {
  expect_bad(head(0, 1) + gstr("flag") + val(BOOL, "\x02"), {"metadata 'flag'", "bool value 2"});
}

TEST(Gguf, DuplicateKeys) {
  expect_bad(head(0, 2) + gstr("k") + val_u32(1) + gstr("k") + val_u32(2),
             {"metadata 'k'", "duplicate key"});
}

TEST(Gguf, MetadataByteLimit) {
  GgufFile::Limits limits;
  limits.max_metadata_bytes = 100;
  const std::string bytes = head(0, 1) + gstr("k") + val_arr(U8, 10, std::string(10, 'a'));
  EXPECT_NO_THROW(parse(bytes));
  expect_error<FormatError>([&] { parse(bytes, limits); },
                            {"model.gguf", "metadata exceeds the limit of 100 bytes"});
}

TEST(Gguf, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufSpec s = small_spec();
    s.kv.emplace_back("general.alignment", val_u32(a));
    expect_bad(s.build(), {"general.alignment", std::to_string(a) + " is not a power of two"});
  }
  GgufSpec s = small_spec();
  s.kv.emplace_back("general.alignment", val(U64, le64(32)));
  expect_bad(s.build(), {"general.alignment", "must be a u32, got u64"});
}

TEST(Gguf, UnknownTensorType) {
  GgufSpec s = small_spec();
  s.tensors[0].type = 16;
  expect_bad(s.build(), {"tensor 'w'", "IQ2_XXS", "not supported", "Q4_K"});
  s.tensors[0].type = 1000;
  expect_bad(s.build(), {"tensor 'w'", "unknown type 1000"});
}

TEST(Gguf, TooManyDims) {
  GgufSpec s = small_spec();
  s.tensors[1].ne = {1, 1, 1, 1, 4};
  expect_bad(s.build(), {"tensor 'b'", "n_dims 5 exceeds 4"});
}

TEST(Gguf, ElementCountOverflow) {
  GgufSpec s = small_spec();
  s.tensors[0].ne = {1ull << 32, 1ull << 32};
  s.tensors[0].offset = 0;
  expect_bad(s.build(), {"tensor 'w'", "element count", "overflows int64"});
  s.tensors[0].ne = {1ull << 63, 1};
  expect_bad(s.build(), {"tensor 'w'", "ne[0] = 9223372036854775808"});
  // Fits int64 as elements but not as F32 bytes.
  s.tensors[0].ne = {1ull << 62};
  expect_bad(s.build(), {"tensor 'w'", "byte size", "overflows"});
  // A zero dim makes the count 0, but the others must still multiply within int64.
  s.tensors[0].ne = {0, 1ull << 32, 1ull << 32};
  expect_bad(s.build(), {"tensor 'w'", "element count"});
}

TEST(Gguf, RowsNotWholeBlocks) {
  GgufSpec s = small_spec();
  s.tensors[0] = {"q", {48, 2}, 8};
  expect_bad(s.build(), {"tensor 'q'", "ne[0] = 48 is not a multiple of the Q8_0 block size 32"});
}

TEST(Gguf, MisalignedOffset) {
  GgufSpec s = small_spec();
  s.tensors[1].offset = 40;
  expect_bad(s.build(), {"tensor 'b'", "offset 40 is not a multiple of the alignment 32"});
}

TEST(Gguf, DataPastTheEnd) {
  GgufSpec s = small_spec();
  s.tensors[1].offset = 1ull << 60;
  expect_bad(s.build(), {"tensor 'b'", "past the end of the data section"});
  s.tensors[1].offset = ~0ull - 31;  // offset + nbytes wraps around
  expect_bad(s.build(), {"tensor 'b'", "past the end"});
}

TEST(Gguf, OverlappingTensors) {
  GgufSpec s = small_spec();
  s.tensors = {{"a", {16}, 0, 0}, {"b", {8}, 0, 32}};  // a is [0, 64), b [32, 64)
  expect_bad(s.build(), {"tensors 'a' and 'b' overlap"});
}

TEST(Gguf, DuplicateTensorNames) {
  GgufSpec s = small_spec();
  s.tensors[1].name = "w";
  expect_bad(s.build(), {"tensor 'w'", "duplicate tensor name"});
}

TEST(Gguf, TensorNameTooLong) {
  GgufSpec s = small_spec();
  s.tensors[0].name = std::string(64, 'n');
  expect_bad(s.build(), {"tensor 0", "name length 64 exceeds the limit of 63"});
}

}  // namespace
}  // namespace hubzoo
