// JSON files of a snapshot (config.json, tokenizer.json, ...), with errors
// that name the file and the field. Every JSON or template file hubzoo reads
// goes through read_text_file, so each one gets the same checks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hubzoo {

// A snapshot's JSON and template files are small (the largest tokenizer.json
// files are tens of MB): anything bigger is refused before it is read.
inline constexpr uint64_t kMaxTextFileBytes = uint64_t{512} << 20;

// The bytes of a small file (JSON, chat_template.jinja). FileError naming the
// file when it is missing, not a regular file (a FIFO would block, a link to
// /dev/zero would never end), larger than `max_bytes` (checked before reading
// and again while reading), or unreadable.
std::string read_text_file(const std::filesystem::path& path,
                           uint64_t max_bytes = kMaxTextFileBytes);

// Bounds on one JSON document. nlohmann's parser is iterative, but copying,
// dumping or walking a value recurses once per level: bounding the depth at
// parse bounds all of them.
struct JsonLimits {
  // Nested arrays/objects: [] is 1, [[]] is 2. Real configs and tokenizer.json
  // files nest under 10 levels.
  size_t max_depth = 128;
  uint64_t max_bytes = kMaxTextFileBytes;
};

// Every JSON text hubzoo parses (files, safetensors headers, request bodies,
// Python-side strings) goes through one of these. FormatError naming `where`
// (a file name, "request body", ...) with line/column and the parser's message
// if it is malformed (a number like 1e999 that overflows a double included),
// or with the depth limit and the path where it was passed, or the size limit.
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          const JsonLimits& limits = {});
// The same, keeping objects' keys in text order (duplicates: first position,
// last value), in time linear in the number of keys.
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where,
                                          const JsonLimits& limits = {});

// A compact rendering of `v` cut at about `max_bytes` (then "..."), for error
// messages: built without recursion and without dumping the whole value first.
inline constexpr size_t kJsonExcerptBytes = 200;
std::string json_excerpt(const nlohmann::json& v, size_t max_bytes = kJsonExcerptBytes);
std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_bytes = kJsonExcerptBytes);

// Nesting depth of a value built in memory (a scalar is 0), without recursion;
// counting stops once it passes `limit`. For values that did not come through
// parse_json (C++ callers), checked before anything recurses over them.
size_t json_depth(const nlohmann::json& v, size_t limit);
size_t json_depth(const nlohmann::ordered_json& v, size_t limit);

// Parses a JSON file read by read_text_file, with parse_json's checks and
// default limits.
nlohmann::json read_json_file(const std::filesystem::path& path);
// The same, keeping objects' keys in file order (chat templates iterate them).
nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path);

// Typed access to one JSON object, for configs. `where` names the source in
// messages, e.g. "/snap/config.json".
class JsonObject {
 public:
  JsonObject(nlohmann::json j, std::string where);

  const nlohmann::json& json() const { return j_; }
  const std::string& where() const { return where_; }
  // True when the key exists and is not null.
  bool has(const std::string& key) const;

  // T is one of int64_t, int, double, float, bool, std::string,
  // std::vector<int64_t>, std::vector<std::string> (instantiated in json.cc).
  // Integer types accept only JSON integers (1.5 and 2.0 are rejected) in range;
  // double/float accept any JSON number.
  // Required field: ConfigError "<where>: missing field 'key'" or
  // "<where>: field 'key' must be <type>, got <json>".
  template <typename T>
  T get(const std::string& key) const;
  // Optional field: fallback when absent or null; type errors still throw.
  template <typename T>
  T get_or(const std::string& key, T fallback) const;
  template <typename T>
  std::optional<T> maybe(const std::string& key) const;
  // Nested object (absent/null -> nullopt; non-object -> ConfigError).
  std::optional<JsonObject> object(const std::string& key) const;

 private:
  nlohmann::json j_;
  std::string where_;
};

}  // namespace hubzoo
