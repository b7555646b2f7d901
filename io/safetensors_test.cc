#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include "base/test_util.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "base/error.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;

using test_util::TempDir;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// Writes a file from a raw header string and data bytes.
void write_raw(const fs::path& p, const std::string& header, const std::string& data) {
  std::ofstream out(p, std::ios::binary);
  out << le64(header.size()) << header << data;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

using test_util::expect_error;

// A small F32 tensor file with one tensor "w" of 4 floats.
void write_small(const fs::path& p, const std::string& name = "w", float base = 0.0f) {
  std::vector<float> v = {base, base + 1, base + 2, base + 3};
  write_safetensors(p, {{name, TensorView{DType::F32, {2, 2}, v.data()}}});
}

TEST(Safetensors, RoundTripsEveryDtype) {
  TempDir dir;
  const std::vector<DType> all = {DType::BOOL,    DType::U8,  DType::I8,  DType::F8_E4M3,
                                  DType::F8_E5M2, DType::I16, DType::U16, DType::F16,
                                  DType::BF16,    DType::I32, DType::U32, DType::F32,
                                  DType::F64,     DType::I64, DType::U64};
  std::map<std::string, std::vector<uint8_t>> bytes;
  std::map<std::string, TensorView> views;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string name = "t." + std::string(dtype_name(all[i]));
    const Shape shape = {static_cast<int64_t>(i % 3 + 1), 5};
    auto& b = bytes[name];
    b.resize(static_cast<size_t>(num_elements(shape)) * dtype_size(all[i]));
    for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(k * 7 + i);
    if (all[i] == DType::BOOL) {
      for (auto& x : b) x &= 1;
    }
    views[name] = TensorView{all[i], shape, b.data()};
  }
  views["scalar"] = TensorView{DType::F32, {}, bytes["t.F32"].data()};
  views["empty"] = TensorView{DType::BF16, {0, 4}, nullptr};
  const fs::path p = dir / "all.safetensors";
  write_safetensors(p, views, {{"format", "pt"}});

  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->path(), p);
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f->tensors().size(), views.size());
  for (const auto& [name, want] : views) {
    ASSERT_TRUE(f->contains(name)) << name;
    const TensorView got = f->view(name);
    EXPECT_EQ(got.dtype, want.dtype) << name;
    EXPECT_EQ(got.shape, want.shape) << name;
    ASSERT_EQ(got.nbytes(), want.nbytes()) << name;
    if (want.nbytes()) {
      EXPECT_EQ(std::memcmp(got.data, want.data, want.nbytes()), 0) << name;
    }
  }
}

TEST(Safetensors, WriterPadsHeaderAndLaysOutInNameOrder) {
  TempDir dir;
  std::vector<uint16_t> a(3, 1), b(5, 2), c(1, 3);
  const fs::path p = dir / "x.safetensors";
  write_safetensors(p, {{"c", {DType::BF16, {1}, c.data()}},
                        {"a", {DType::BF16, {3}, a.data()}},
                        {"b", {DType::BF16, {5}, b.data()}}});
  std::ifstream in(p, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(all[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(all.size(), 8 + n + 18);
  EXPECT_EQ(all[8 + n - 1] == ' ' || all[8 + n - 1] == '}', true);

  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->tensors().at("a").begin, 0u);
  EXPECT_EQ(f->tensors().at("b").begin, 6u);
  EXPECT_EQ(f->tensors().at("c").begin, 16u);
  EXPECT_TRUE(f->metadata().empty());
}

TEST(Safetensors, ViewIsZeroCopyAndReleaseKeepsDataReadable) {
  TempDir dir;
  const size_t n = 5 * 4096;  // several pages
  std::vector<float> big(n), small(10);
  std::iota(big.begin(), big.end(), 0.0f);
  std::iota(small.begin(), small.end(), 100.0f);
  const fs::path p = dir / "m.safetensors";
  write_safetensors(p, {{"a_small", {DType::F32, {10}, small.data()}},
                        {"b_big", {DType::F32, {static_cast<int64_t>(n)}, big.data()}}});
  auto f = SafetensorsFile::open(p);
  const auto va = f->view("a_small");
  const auto vb = f->view("b_big");
  EXPECT_EQ(static_cast<const uint8_t*>(vb.data) - static_cast<const uint8_t*>(va.data), 40);
  f->release("b_big");
  f->release("a_small");  // no whole page inside: a no-op
  // MAP_PRIVATE read-only: dropped pages are read back from the file.
  EXPECT_EQ(std::memcmp(vb.data, big.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(va.data, small.data(), 40), 0);
  expect_error<TensorMappingError>([&] { f->view("nope"); }, {"m.safetensors", "'nope'"});
  expect_error<TensorMappingError>([&] { f->release("nope"); }, {"'nope'"});
}

// The file's mapping is advised against huge pages (io/mapped_file.cc): the
// VmFlags of its range in /proc/self/smaps carry "nh".
TEST(Safetensors, MappingIsNotHugePaged) {
  TempDir dir;
  std::vector<float> w(3 * 4096, 1.0f);
  const fs::path p = dir / "m.safetensors";
  write_safetensors(p, {{"w", {DType::F32, {static_cast<int64_t>(w.size())}, w.data()}}});
  auto f = SafetensorsFile::open(p);
  const auto at = reinterpret_cast<uintptr_t>(f->view("w").data);
  std::ifstream smaps("/proc/self/smaps");
  std::string line, flags;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) {  // a mapping's first line
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      flags = line;
      break;
    }
  }
  ASSERT_FALSE(flags.empty()) << "no VmFlags for the mapping in /proc/self/smaps";
  EXPECT_NE((flags + " ").find(" nh "), std::string::npos) << flags;
}

TEST(Safetensors, MissingFileIsFileError) {
  TempDir dir;
  expect_error<FileError>([&] { SafetensorsFile::open(dir / "absent.safetensors"); },
                          {"absent.safetensors"});
}

// A FIFO in a model folder (hostile or mistaken) is refused at once: opening
// it for reading used to wait for a writer that never came.
TEST(Safetensors, FifoIsRefusedWithoutWaiting) {
  TempDir dir;
  const auto fifo = dir / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error<FileError>([&] { SafetensorsFile::open(fifo); },
                          {"model.safetensors", "not a regular file"});
}

TEST(Safetensors, FileShorterThanEightBytes) {
  TempDir dir;
  write_bytes(dir / "short.safetensors", "abc");
  expect_error<FormatError>([&] { SafetensorsFile::open(dir / "short.safetensors"); },
                            {"short.safetensors", "8"});
}

TEST(Safetensors, TruncatedInTheData) {
  TempDir dir;
  const fs::path p = dir / "trunc.safetensors";
  write_small(p, "layer.weight");
  fs::resize_file(p, fs::file_size(p) - 3);
  expect_error<FormatError>([&] { SafetensorsFile::open(p); },
                            {"trunc.safetensors", "layer.weight", "past the data buffer"});
}

TEST(Safetensors, HeaderLengthPastEndOfFile) {
  TempDir dir;
  const fs::path p = dir / "hlen.safetensors";
  write_bytes(p, le64(1000) + "{}");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); },
                            {"hlen.safetensors", "past the end of the file"});
}

TEST(Safetensors, HeaderLengthOverLimit) {
  TempDir dir;
  const fs::path p = dir / "huge.safetensors";
  write_bytes(p, le64(200'000'000) + "{}");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"huge.safetensors", "100 MB"});
}

TEST(Safetensors, MalformedJsonHeader) {
  TempDir dir;
  const fs::path p = dir / "badjson.safetensors";
  write_raw(p, R"({"w": {"dtype": "F32", )", "");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); },
                            {"badjson.safetensors", "malformed JSON"});
  write_raw(p, "[1, 2]", "");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"badjson.safetensors", "object"});
}

// A shape 100k arrays deep crashed the loader (the error message dumped it
// recursively); it is refused at parse, naming the file and the depth.
TEST(Safetensors, DeepHeaderIsRefusedAtParse) {
  TempDir dir;
  const fs::path p = dir / "deep.safetensors";
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_raw(p, R"({"s": {"dtype": "U8", "shape": )" + deep + R"(, "data_offsets": [0, 1]}})", "x");
  expect_error<FormatError>(
      [&] { SafetensorsFile::open(p); },
      {"deep.safetensors", "nested deeper than the limit of 16", "/s/shape/0"});
}

// A wrong shape is quoted in the message, cut short.
TEST(Safetensors, BadShapeMessageIsBounded) {
  TempDir dir;
  const fs::path p = dir / "long.safetensors";
  std::string shape = "[-1";
  for (int i = 0; i < 100000; ++i) shape += ",1";
  write_raw(p, R"({"s": {"dtype": "U8", "shape": )" + shape + R"(], "data_offsets": [0, 1]}})",
            "x");
  try {
    SafetensorsFile::open(p);
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_LT(std::string(e.what()).size(), 600u) << e.what();
  }
}

TEST(Safetensors, EntryNotAnObject) {
  TempDir dir;
  const fs::path p = dir / "entry.safetensors";
  write_raw(p, R"({"w.bias": [1, 2]})", "");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"entry.safetensors", "w.bias"});
}

// A header value nested 100k deep is refused with a short message naming the
// tensor (the message used to dump() the value, recursing once per level: a
// stack overflow), and a long list is cut in the message.
TEST(Safetensors, DeepOrLongHeaderValuesGetShortMessages) {
  TempDir dir;
  const fs::path p = dir / "deep.safetensors";
  const int depth = 100000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  write_raw(p, R"({"w": )" + deep + "}", "");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); },
                            {"deep.safetensors", "nested deeper than the limit of 16"});
  write_raw(p, R"({"w": {"dtype": "F32", "shape": )" + deep + R"(, "data_offsets": [0, 0]}})", "");
  expect_error<FormatError>(
      [&] { SafetensorsFile::open(p); },
      {"deep.safetensors", "nested deeper than the limit of 16", "/w/shape/0"});
  std::string list = "[1";
  for (int i = 0; i < 1000; ++i) list += ", -1";
  write_raw(p, R"({"w": {"dtype": "F32", "shape": )" + list + R"(], "data_offsets": [0, 0]}})", "");
  try {
    SafetensorsFile::open(p);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'shape' must be a list of non-negative integers, got [1,-1,-1,"),
              std::string::npos)
        << what;
    EXPECT_LT(what.size(), p.string().size() + 300) << what;  // an excerpt, not the whole list
  }
}

TEST(Safetensors, UnknownDtype) {
  TempDir dir;
  const fs::path p = dir / "dtype.safetensors";
  write_raw(p, R"({"emb": {"dtype": "F7", "shape": [1], "data_offsets": [0, 4]}})",
            std::string(4, '\0'));
  expect_error<FormatError>([&] { SafetensorsFile::open(p); },
                            {"dtype.safetensors", "'emb'", "'F7'"});
}

TEST(Safetensors, BadShape) {
  TempDir dir;
  const fs::path p = dir / "shape.safetensors";
  write_raw(p, R"({"s": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})", "x");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"shape.safetensors", "'s'"});
  write_raw(p, R"({"s": {"dtype": "U8", "shape": 1, "data_offsets": [0, 1]}})", "x");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"shape.safetensors", "'s'"});
  write_raw(p, R"({"s": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}})", "x");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"shape.safetensors", "'s'"});
}

TEST(Safetensors, BadDataOffsets) {
  TempDir dir;
  const fs::path p = dir / "offs.safetensors";
  write_raw(p, R"({"q": {"dtype": "U8", "shape": [0], "data_offsets": [4, 2]}})", "xxxx");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"offs.safetensors", "'q'"});
  write_raw(p, R"({"q": {"dtype": "U8", "shape": [2], "data_offsets": [0]}})", "xxxx");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"offs.safetensors", "'q'"});
}

TEST(Safetensors, OffsetsPastEnd) {
  TempDir dir;
  const fs::path p = dir / "past.safetensors";
  write_raw(p, R"({"k_proj": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            std::string(8, '\0'));
  expect_error<FormatError>([&] { SafetensorsFile::open(p); },
                            {"past.safetensors", "'k_proj'", "past the data buffer"});
}

TEST(Safetensors, OverlappingOffsets) {
  TempDir dir;
  const fs::path p = dir / "overlap.safetensors";
  write_raw(p,
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "z": {"dtype": "U8", "shape": [0], "data_offsets": [4, 4]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            std::string(12, '\0'));
  expect_error<FormatError>([&] { SafetensorsFile::open(p); },
                            {"overlap.safetensors", "'a'", "'b'", "overlap"});
}

TEST(Safetensors, BytesDisagreeWithShapeTimesDtype) {
  TempDir dir;
  const fs::path p = dir / "size.safetensors";
  write_raw(p, R"({"v_proj": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})",
            std::string(8, '\0'));
  expect_error<FormatError>([&] { SafetensorsFile::open(p); },
                            {"size.safetensors", "'v_proj'", "[2, 3]", "12"});
  // Shape whose element count overflows 64 bits.
  write_raw(p,
            R"({"v_proj": {"dtype": "F32", "shape": [4294967296, 4294967296, 16],
                "data_offsets": [0, 0]}})",
            "");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"size.safetensors", "'v_proj'"});
  // ... even when a zero dimension makes it empty (num_elements would overflow).
  write_raw(p,
            R"({"v_proj": {"dtype": "F32", "shape": [4294967296, 4294967296, 0],
                "data_offsets": [0, 0]}})",
            "");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"size.safetensors", "'v_proj'"});
  write_raw(p, R"({"v_proj": {"dtype": "F32", "shape": [4294967296, 0], "data_offsets": [0, 0]}})",
            "");
  EXPECT_EQ(SafetensorsFile::open(p)->view("v_proj").nbytes(), 0u);
}

TEST(Safetensors, MetadataMustBeStrings) {
  TempDir dir;
  const fs::path p = dir / "meta.safetensors";
  write_raw(p, R"({"__metadata__": {"format": 3}})", "");
  expect_error<FormatError>([&] { SafetensorsFile::open(p); }, {"meta.safetensors", "format"});
}

TEST(Safetensors, WriterRejectsBadInputAndUnwritablePath) {
  TempDir dir;
  float x = 1;
  expect_error<InvalidArgument>(
      [&] {
        write_safetensors(dir / "n.safetensors", {{"w", {DType::F32, {-1}, &x}}});
      },
      {"'w'"});
  expect_error<FileError>(
      [&] {
        write_safetensors(dir / "no" / "dir" / "x.safetensors", {{"w", {DType::F32, {1}, &x}}});
      },
      {"x.safetensors"});
  EXPECT_FALSE(fs::exists(dir / "n.safetensors"));
}

// ---- Checkpoint ----------------------------------------------------------------

void write_index(const fs::path& p, const std::string& weight_map) {
  write_bytes(p, R"({"metadata": {"total_size": 0}, "weight_map": )" + weight_map + "}");
}

TEST(Checkpoint, SingleFile) {
  TempDir dir;
  write_small(dir / "model.safetensors", "w", 5.0f);
  write_small(dir / "other.safetensors", "ignored");  // model.safetensors wins
  const Checkpoint ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck.names(), std::vector<std::string>{"w"});
  EXPECT_EQ(ck.file_of("w"), dir / "model.safetensors");
  EXPECT_EQ(static_cast<const float*>(ck.view("w").data)[1], 6.0f);
  EXPECT_EQ(ck.info("w").shape, (Shape{2, 2}));
  EXPECT_FALSE(ck.contains("ignored"));
  expect_error<TensorMappingError>([&] { ck.view("nope"); }, {"'nope'"});
}

TEST(Checkpoint, ShardedViaIndex) {
  TempDir dir;
  std::vector<float> a = {1, 2}, b = {3, 4, 5}, c = {6};
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {{"a", {DType::F32, {2}, a.data()}}, {"b", {DType::F32, {3}, b.data()}}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {{"c", {DType::F32, {1}, c.data()}}});
  write_small(dir / "stray.safetensors", "stray");  // not in the index: not loaded
  write_index(dir / "model.safetensors.index.json",
              R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                  "c": "model-00002-of-00002.safetensors"})");
  Checkpoint ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ck.file_of("c"), dir / "model-00002-of-00002.safetensors");
  EXPECT_EQ(static_cast<const float*>(ck.view("b").data)[2], 5.0f);
  EXPECT_EQ(static_cast<const float*>(ck.view("c").data)[0], 6.0f);
  const Checkpoint copy = ck;  // copies share the mappings
  ck = Checkpoint::open(dir.path());
  EXPECT_EQ(static_cast<const float*>(copy.view("a").data)[1], 2.0f);
}

TEST(Checkpoint, IndexWithMissingShard) {
  TempDir dir;
  write_small(dir / "model-00001-of-00002.safetensors", "a");
  write_index(
      dir / "model.safetensors.index.json",
      R"({"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})");
  expect_error<FileError>([&] { Checkpoint::open(dir.path()); },
                          {"model-00002-of-00002.safetensors", "model.safetensors.index.json"});
}

TEST(Checkpoint, IndexNamesTensorItsShardLacks) {
  TempDir dir;
  write_small(dir / "shard1.safetensors", "a");
  write_small(dir / "shard2.safetensors", "c");
  write_index(dir / "model.safetensors.index.json",
              R"({"a": "shard1.safetensors", "b.missing": "shard1.safetensors",
                  "c": "shard2.safetensors"})");
  expect_error<FormatError>([&] { Checkpoint::open(dir.path()); },
                            {"shard1.safetensors", "'b.missing'"});
}

TEST(Checkpoint, DuplicateTensorAcrossShards) {
  TempDir dir;
  write_small(dir / "shard1.safetensors", "dup.weight");
  write_small(dir / "shard2.safetensors", "dup.weight");
  write_index(dir / "model.safetensors.index.json",
              R"({"dup.weight": "shard1.safetensors", "x": "shard2.safetensors"})");
  expect_error<FormatError>([&] { Checkpoint::open(dir.path()); },
                            {"'dup.weight'", "shard1.safetensors", "shard2.safetensors"});
  // Same without an index (glob fallback).
  fs::remove(dir / "model.safetensors.index.json");
  expect_error<FormatError>([&] { Checkpoint::open(dir.path()); },
                            {"'dup.weight'", "shard1.safetensors", "shard2.safetensors"});
}

TEST(Checkpoint, BadIndex) {
  TempDir dir;
  write_small(dir / "s.safetensors", "a");
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": [1]})");
  expect_error<FormatError>([&] { Checkpoint::open(dir.path()); },
                            {"model.safetensors.index.json", "weight_map"});
  write_index(dir / "model.safetensors.index.json", R"({"a": "../s.safetensors"})");
  expect_error<FormatError>([&] { Checkpoint::open(dir.path()); },
                            {"model.safetensors.index.json", "'a'"});
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": )");
  expect_error<FormatError>([&] { Checkpoint::open(dir.path()); },
                            {"model.safetensors.index.json"});
}

TEST(Checkpoint, GlobFallback) {
  TempDir dir;
  write_small(dir / "b.safetensors", "y");
  write_small(dir / "a.safetensors", "x");
  const Checkpoint ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(ck.file_of("y"), dir / "b.safetensors");
}

TEST(Checkpoint, NoSafetensorsAtAll) {
  TempDir dir;
  write_bytes(dir / "config.json", "{}");
  expect_error<FileError>([&] { Checkpoint::open(dir.path()); }, {dir.path().string()});
  expect_error<FileError>([&] { Checkpoint::open(dir / "absent"); }, {"absent"});
}

TEST(Checkpoint, CorruptShardNamesTheShard) {
  TempDir dir;
  write_bytes(dir / "model.safetensors", "abc");
  expect_error<FormatError>([&] { Checkpoint::open(dir.path()); }, {"model.safetensors"});
}

}  // namespace
}  // namespace hubzoo
