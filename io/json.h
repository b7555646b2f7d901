// JSON files of a snapshot (config.json, tokenizer.json, ...), with errors
// that name the file and the field. Every JSON or template file hubzoo reads
// goes through read_text_file, so each one gets the same checks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

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

// Parses a JSON file read by read_text_file. FormatError naming the file,
// line/column and parser message if it is malformed.
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
