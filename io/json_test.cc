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
