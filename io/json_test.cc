#include "io/json.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>

#include "base/test_util.h"

#include "base/error.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / ("hubzoo_json_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter++) + ".json");
    std::ofstream(path_) << text;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

using test_util::expect_error;

JsonObject cfg() {
  return JsonObject(nlohmann::json::parse(R"({
    "hidden_size": 64, "rope_theta": 10000, "eps": 1e-6, "tie": true, "name": "llama",
    "half": 1.5, "two": 2.0, "big": 10000000000, "neg": -3, "nothing": null,
    "ids": [1, 2, 3], "archs": ["LlamaForCausalLM"], "mixed": [1, "a"],
    "rope_scaling": {"type": "linear", "factor": 2}, "str_num": "3"})"),
                    "/snap/config.json");
}

TEST(Json, ReadsFile) {
  TempFile f(R"({"a": 1, "b": [true]})");
  const auto j = read_json_file(f.path());
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"][0], true);
}

TEST(Json, MissingFileIsFileError) {
  expect_error<FileError>([] { read_json_file("/nonexistent/hubzoo/config.json"); },
                          {"/nonexistent/hubzoo/config.json"});
}

TEST(Json, MalformedFileNamesFileAndLine) {
  TempFile f("{\n  \"a\": 1,\n  \"b\": ]\n}\n");
  expect_error<FormatError>([&] { read_json_file(f.path()); },
                            {f.path().string(), "line 3", "malformed JSON"});
}

TEST(Json, ReadsOrderedFileInFileOrder) {
  TempFile f(R"({"z": 1, "a": 2})");
  const auto j = read_ordered_json_file(f.path());
  EXPECT_EQ(j.begin().key(), "z");
}

// Special files named like a config fail at once with a FileError naming the
// file, instead of blocking on a FIFO or reading /dev/zero until memory runs out.
TEST(Json, SpecialFilesAreRefusedQuickly) {
  test_util::TempDir dir("hubzoo_json_special");
  const fs::path fifo = dir / "config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  expect_error<FileError>([&] { read_json_file(fifo); }, {fifo.string(), "not a regular file"});
  const fs::path zero = dir / "sub" / "config.json";
  fs::create_directories(zero.parent_path());
  fs::create_symlink("/dev/zero", zero);
  expect_error<FileError>([&] { read_json_file(zero); }, {zero.string(), "a device"});
  expect_error<FileError>([&] { read_ordered_json_file(dir.path()); }, {"a directory"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// An oversized file is refused from its size, before a byte is read: the
// sparse file of zeros would otherwise be read and fail as malformed JSON.
TEST(Json, OversizedFileIsRefusedBeforeReading) {
  test_util::TempDir dir("hubzoo_json_big");
  const fs::path big = dir / "config.json";
  std::ofstream(big) << "{}";
  fs::resize_file(big, kMaxTextFileBytes + 1);  // sparse: no disk used
  expect_error<FileError>([&] { read_json_file(big); },
                          {big.string(), std::to_string(kMaxTextFileBytes + 1), "over the limit"});
  TempFile small(R"({"a": 1})");
  expect_error<FileError>([&] { read_text_file(small.path(), 4); }, {"over the limit of 4 bytes"});
  EXPECT_EQ(read_text_file(small.path(), 8), R"({"a": 1})");
}

// 100k nested arrays: the parser is iterative, but a copy, dump or error
// message over such a value recursed once per level and overflowed the stack.
// Refused at parse, naming the source, the limit and where it was passed.
TEST(JsonParse, DepthIsBoundedAndNamed) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_error<FormatError>([&] { parse_json(deep, "x.json"); },
                            {"x.json", "nested deeper than the limit of 128 levels", "/0/0/0"});
  const std::string key = R"({"a": {"extra": )" + deep + "}}";
  expect_error<FormatError>(
      [&] {
        parse_ordered_json(key, "request body", {8, 1 << 20});
      },
      {"request body", "limit of 8 levels", "(at /a/extra/0/0/0/0/0/0)"});
  // Exactly at the limit parses; one more level does not.
  const std::string at = std::string(8, '[') + std::string(8, ']');
  EXPECT_EQ(json_depth(parse_json(at, "x", {8, 100}), 100), 8u);
  EXPECT_THROW(parse_json("[" + at + "]", "x", {8, 100}), FormatError);
  EXPECT_EQ(json_depth(parse_json("1", "x", {0, 100}), 10), 0u);
}

TEST(JsonParse, DeepFileIsRefusedNamingTheFile) {
  TempFile f(R"({"hidden_size": 8, "extra": )" + std::string(100000, '[') +
             std::string(100000, ']') + "}");
  expect_error<FormatError>([&] { read_json_file(f.path()); },
                            {f.path().string(), "nested deeper", "/extra/0"});
  TempFile arr(std::string(100000, '[') + std::string(100000, ']'));
  expect_error<FormatError>([&] { read_ordered_json_file(arr.path()); },
                            {arr.path().string(), "nested deeper"});
}

// 1e999 overflows a double: nlohmann reports out_of_range 406, not
// parse_error; both are a FormatError naming the source and position.
TEST(JsonParse, NumberOverflowAndSyntaxErrorsAreFormatErrors) {
  expect_error<FormatError>(
      [] { parse_json(R"({"t": 1e999})", "request body"); },
      {"request body", "line 1, column", "number overflow", "1e999", "(at /t)"});
  expect_error<FormatError>([] { parse_json(R"({"a": [1, {"b": [2, 3e400]}]})", "x"); },
                            {"(at /a/1/b/1)"});
  expect_error<FormatError>(
      [] {
        parse_json(std::string(9, '[') + "1", "x", {9, 100});
      },
      {"(at /0/0/0/0/0/0/0/0/1)"});
  expect_error<FormatError>(
      [] {
        parse_json("[1, [2, [[[", "x", {4, 100});
      },
      {"limit of 4 levels (at /1/1/0/0)"});
  expect_error<FormatError>([] { parse_ordered_json("{\n\"a\": }", "f.json"); },
                            {"f.json", "malformed JSON at line 2"});
  expect_error<FormatError>([] { parse_json("[1] 2", "f.json"); }, {"f.json"});
  expect_error<FormatError>([] { parse_json("", "f.json"); }, {"f.json"});
  expect_error<FormatError>(
      [] {
        parse_json("[1, 2]", "f.json", {8, 5});
      },
      {"f.json", "6 bytes of JSON, over the limit of 5 bytes"});
}

// Keys stay in text order; a duplicate keeps its first position and takes
// the last value, as nlohmann's ordered_map does.
TEST(JsonParse, OrderedObjectsKeepOrderAndDuplicates) {
  const auto j = parse_ordered_json(R"({"z": 1, "a": {"q": [1, {"r": 2}]}, "z": 3})", "x");
  EXPECT_EQ(j.dump(), R"({"z":3,"a":{"q":[1,{"r":2}]}})");
  EXPECT_EQ(parse_json(R"({"b": 1, "a": 2, "b": 4})", "x").dump(), R"({"a":2,"b":4})");
  EXPECT_EQ(parse_json("[]", "x"), nlohmann::json::array());
  EXPECT_EQ(parse_json(R"("s")", "x"), "s");
}

// ordered_map's operator[] scans linearly: 100k keys took ~20 s (O(n^2)) in
// nlohmann's own parser; through the hash index it is linear.
TEST(JsonParse, ManyKeysInOrderedObjectAreLinear) {
  const int n = 100000;
  std::string text = "{";
  for (int i = 0; i < n; ++i) text += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + "1";
  text += ",\"17\":2,\"99999\":3}";
  const auto start = std::chrono::steady_clock::now();
  const auto j = parse_ordered_json(text, "x");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ASSERT_EQ(j.size(), static_cast<size_t>(n));
  auto it = j.begin();
  EXPECT_EQ(it.key(), "0");
  EXPECT_EQ(j["17"], 2);
  EXPECT_EQ(j["99999"], 3);
  EXPECT_EQ((--j.end()).key(), "99999");
}

// Error messages show a bounded excerpt, built without dumping the value.
TEST(JsonParse, ExcerptIsBoundedAndIterative) {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 1000000; ++i) big.push_back(i);
  const std::string e = json_excerpt(big, 50);
  EXPECT_EQ(e.substr(0, 8), "[0,1,2,3");
  EXPECT_LE(e.size(), 53u);
  EXPECT_EQ(e.substr(e.size() - 3), "...");
  EXPECT_EQ(json_excerpt(nlohmann::json::parse(R"({"a":[1,"x"],"b":null})")),
            R"({"a":[1,"x"],"b":null})");
  EXPECT_EQ(json_excerpt(nlohmann::ordered_json::parse(R"({"z":{},"a":[]})")),
            R"({"z":{},"a":[]})");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(1000, 'x')), 10), "\"xxxxxxxxx...");
  // A value built in memory 100k deep (nlohmann destroys it iteratively).
  nlohmann::ordered_json deep = 1;
  for (int i = 0; i < 100000; ++i) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    a.push_back(std::move(deep));
    deep = std::move(a);
  }
  EXPECT_EQ(json_excerpt(deep, 5), "[[[[[...");
  EXPECT_EQ(json_depth(deep, 64), 65u);  // stops counting past the limit
}

// A config field of the wrong type names a bounded excerpt of the value.
TEST(JsonObject, WrongTypeMessageIsBounded) {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  try {
    JsonObject(nlohmann::json{{"n", big}}, "c.json").get<int64_t>("n");
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u);
    EXPECT_NE(std::string(e.what()).find("field 'n' must be an integer, got [0,1,2"),
              std::string::npos);
  }
}

TEST(JsonObject, TypedGetters) {
  const JsonObject c = cfg();
  EXPECT_EQ(c.get<int64_t>("hidden_size"), 64);
  EXPECT_EQ(c.get<int>("hidden_size"), 64);
  EXPECT_EQ(c.get<int>("neg"), -3);
  EXPECT_EQ(c.get<int64_t>("big"), 10000000000LL);
  EXPECT_EQ(c.get<double>("rope_theta"), 10000.0);  // ints accepted as numbers
  EXPECT_FLOAT_EQ(c.get<float>("eps"), 1e-6f);
  EXPECT_EQ(c.get<double>("half"), 1.5);
  EXPECT_TRUE(c.get<bool>("tie"));
  EXPECT_EQ(c.get<std::string>("name"), "llama");
  EXPECT_EQ(c.get<std::vector<int64_t>>("ids"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(c.get<std::vector<std::string>>("archs"), std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(c.where(), "/snap/config.json");
}

TEST(JsonObject, IntegerGettersRejectNonIntegers) {
  const JsonObject c = cfg();
  expect_error<ConfigError>([&] { c.get<int>("half"); },
                            {"/snap/config.json", "'half'", "integer", "1.5"});
  expect_error<ConfigError>([&] { c.get<int64_t>("half"); }, {"'half'"});
  expect_error<ConfigError>([&] { c.get<int64_t>("two"); }, {"'two'"});
  expect_error<ConfigError>([&] { c.get<int64_t>("str_num"); }, {"'str_num'"});
  expect_error<ConfigError>([&] { c.get<int>("big"); }, {"'big'"});  // out of int range
  expect_error<ConfigError>([&] { c.get<std::vector<int64_t>>("mixed"); }, {"'mixed'"});
  expect_error<ConfigError>([&] { c.get<std::vector<std::string>>("mixed"); }, {"'mixed'"});
}

TEST(JsonObject, OtherTypeErrors) {
  const JsonObject c = cfg();
  expect_error<ConfigError>([&] { c.get<bool>("hidden_size"); }, {"'hidden_size'", "boolean"});
  expect_error<ConfigError>([&] { c.get<std::string>("hidden_size"); }, {"'hidden_size'"});
  expect_error<ConfigError>([&] { c.get<double>("name"); }, {"'name'", "\"llama\""});
}

TEST(JsonObject, MissingAndNullFields) {
  const JsonObject c = cfg();
  EXPECT_TRUE(c.has("hidden_size"));
  EXPECT_FALSE(c.has("nothing"));
  EXPECT_FALSE(c.has("absent"));
  expect_error<ConfigError>([&] { c.get<int>("absent"); },
                            {"/snap/config.json", "missing field 'absent'"});
  expect_error<ConfigError>([&] { c.get<int>("nothing"); }, {"missing field 'nothing'"});
  EXPECT_EQ(c.get_or<int>("absent", 7), 7);
  EXPECT_EQ(c.get_or<int>("nothing", 8), 8);
  EXPECT_EQ(c.get_or<int>("hidden_size", 8), 64);
  EXPECT_EQ(c.get_or<std::string>("absent", "x"), "x");
  expect_error<ConfigError>([&] { c.get_or<int>("half", 1); }, {"'half'"});
  EXPECT_EQ(c.maybe<double>("absent"), std::nullopt);
  EXPECT_EQ(c.maybe<double>("eps"), 1e-6);
  expect_error<ConfigError>([&] { c.maybe<bool>("name"); }, {"'name'"});
}

TEST(JsonObject, NestedObjects) {
  const JsonObject c = cfg();
  const auto rs = c.object("rope_scaling");
  ASSERT_TRUE(rs.has_value());
  EXPECT_EQ(rs->get<std::string>("type"), "linear");
  EXPECT_EQ(rs->get<double>("factor"), 2.0);
  expect_error<ConfigError>([&] { rs->get<int>("low_freq"); },
                            {"/snap/config.json", "rope_scaling", "'low_freq'"});
  EXPECT_FALSE(c.object("absent").has_value());
  EXPECT_FALSE(c.object("nothing").has_value());
  expect_error<ConfigError>([&] { c.object("ids"); }, {"'ids'", "object"});
  expect_error<ConfigError>([] { JsonObject(nlohmann::json::array(), "cfg.json"); },
                            {"cfg.json", "object"});
}

}  // namespace
}  // namespace hubzoo
