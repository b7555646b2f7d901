#include "io/json.h"

#include <cstdint>
#include <fstream>
#include <limits>
#include <vector>

#include "base/error.h"

namespace hubzoo {

namespace {

bool is_int64(const nlohmann::json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return true;
  return v.is_number_unsigned() &&
         v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

// Converts v to T or returns false. Integer targets reject non-integral JSON
// (1.5 and also 2.0: the JSON says float, as Python would read it).
template <typename T>
bool convert(const nlohmann::json& v, T& out);

template <>
bool convert(const nlohmann::json& v, int64_t& out) {
  if (!is_int64(v)) return false;
  out = v.get<int64_t>();
  return true;
}

template <>
bool convert(const nlohmann::json& v, int& out) {
  if (!is_int64(v)) return false;
  const auto x = v.get<int64_t>();
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) return false;
  out = static_cast<int>(x);
  return true;
}

template <>
bool convert(const nlohmann::json& v, double& out) {
  if (!v.is_number()) return false;
  out = v.get<double>();
  return true;
}

template <>
bool convert(const nlohmann::json& v, float& out) {
  if (!v.is_number()) return false;
  out = static_cast<float>(v.get<double>());
  return true;
}

template <>
bool convert(const nlohmann::json& v, bool& out) {
  if (!v.is_boolean()) return false;
  out = v.get<bool>();
  return true;
}

template <>
bool convert(const nlohmann::json& v, std::string& out) {
  if (!v.is_string()) return false;
  out = v.get<std::string>();
  return true;
}

template <>
bool convert(const nlohmann::json& v, std::vector<int64_t>& out) {
  if (!v.is_array()) return false;
  std::vector<int64_t> r;
  for (const auto& e : v) {
    if (!is_int64(e)) return false;
    r.push_back(e.get<int64_t>());
  }
  out = std::move(r);
  return true;
}

template <>
bool convert(const nlohmann::json& v, std::vector<std::string>& out) {
  if (!v.is_array()) return false;
  std::vector<std::string> r;
  for (const auto& e : v) {
    if (!e.is_string()) return false;
    r.push_back(e.get<std::string>());
  }
  out = std::move(r);
  return true;
}

template <typename T>
constexpr const char* type_word() {
  if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int>) return "an integer";
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) return "a number";
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "a list of integers";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of strings";
  return "?";
}

}  // namespace

namespace {

// What a file that is not a regular file is, for the error message.
const char* special_file_kind(const std::filesystem::file_status& st) {
  namespace fs = std::filesystem;
  if (fs::is_directory(st)) return "a directory";
  if (fs::is_fifo(st)) return "a FIFO";
  if (fs::is_character_file(st) || fs::is_block_file(st)) return "a device";
  if (fs::is_socket(st)) return "a socket";
  return "a special file";
}

}  // namespace

std::string read_text_file(const std::filesystem::path& path, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  const std::string name = path.string();
  const std::string limit = " the limit of " + std::to_string(max_bytes) + " bytes";
  // status() follows links: a link to /dev/zero is a device, refused before open()
  // (which would block on a FIFO).
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) {
    throw FileError(name + ": cannot open file: no such file");
  }
  if (ec) throw FileError(name + ": cannot open file: " + ec.message());
  if (!fs::is_regular_file(st)) {
    throw FileError(name + ": not a regular file (" + special_file_kind(st) + ")");
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > max_bytes) {
    throw FileError(name + ": " + std::to_string(size) + " bytes, over" + limit);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(name + ": cannot open file");
  // Read in chunks up to the bound: the size above may be stale, or 0 (procfs).
  std::string text;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes) throw FileError(name + ": grew over" + limit + " while read");
  }
  if (in.bad()) throw FileError(name + ": read failed");
  return text;
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  return parse_json(read_text_file(path), path.string());
}

nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path) {
  return parse_ordered_json(read_text_file(path), path.string());
}

JsonObject::JsonObject(nlohmann::json j, std::string where)
    : j_(std::move(j)), where_(std::move(where)) {
  if (!j_.is_object())
    throw ConfigError(where_ + ": expected a JSON object, got " + json_excerpt(j_));
}

bool JsonObject::has(const std::string& key) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

template <typename T>
T JsonObject::get(const std::string& key) const {
  auto v = maybe<T>(key);
  if (!v) throw ConfigError(where_ + ": missing field '" + key + "'");
  return std::move(*v);
}

template <typename T>
T JsonObject::get_or(const std::string& key, T fallback) const {
  auto v = maybe<T>(key);
  return v ? std::move(*v) : std::move(fallback);
}

template <typename T>
std::optional<T> JsonObject::maybe(const std::string& key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return std::nullopt;
  T out{};
  if (!convert(*it, out)) {
    throw ConfigError(where_ + ": field '" + key + "' must be " + type_word<T>() + ", got " +
                      json_excerpt(*it));
  }
  return out;
}

std::optional<JsonObject> JsonObject::object(const std::string& key) const {
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) {
    throw ConfigError(where_ + ": field '" + key + "' must be an object, got " + json_excerpt(*it));
  }
  return JsonObject(*it, where_ + ": " + key);
}

#define HUBZOO_JSON_INSTANTIATE(T)                               \
  template T JsonObject::get<T>(const std::string&) const;       \
  template T JsonObject::get_or<T>(const std::string&, T) const; \
  template std::optional<T> JsonObject::maybe<T>(const std::string&) const;

HUBZOO_JSON_INSTANTIATE(int64_t)
HUBZOO_JSON_INSTANTIATE(int)
HUBZOO_JSON_INSTANTIATE(double)
HUBZOO_JSON_INSTANTIATE(float)
HUBZOO_JSON_INSTANTIATE(bool)
HUBZOO_JSON_INSTANTIATE(std::string)
HUBZOO_JSON_INSTANTIATE(std::vector<int64_t>)
HUBZOO_JSON_INSTANTIATE(std::vector<std::string>)

#undef HUBZOO_JSON_INSTANTIATE

}  // namespace hubzoo
