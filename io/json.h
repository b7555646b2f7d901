// JSON files of a snapshot (config.json, generation_config.json, ...), with
// errors that name the file and the field.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace hubzoo {

// Parses a JSON file. FileError if it cannot be read; FormatError naming the
// file, line/byte position and parser message if it is malformed.
nlohmann::json read_json_file(const std::filesystem::path& path);

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
