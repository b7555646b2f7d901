// The one JSON parser entry point: nlohmann's iterative parser driven through
// a SAX handler that bounds nesting depth and builds the DOM itself, and
// bounded, non-recursive renderings of values for error messages.
#include <algorithm>
#include <memory>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "io/json.h"

namespace hubzoo {
namespace {

// Line and column (1-based) of byte offset `byte` (1-based, as nlohmann reports).
std::string position_of(std::string_view text, size_t byte) {
  size_t line = 1, col = 1;
  const size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

// Builds a Json value from SAX events like nlohmann's json_sax_dom_parser,
// with two differences: opening a container deeper than `max_depth` throws
// FormatError (so nothing later recurses deeper than that), and an ordered
// object finds duplicate keys through a hash index once it is large (the
// ordered_map's own operator[] scans linearly: 100k keys cost O(n^2)).
template <typename Json>
class BoundedDomBuilder {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedDomBuilder(Json& root, std::string_view text, const std::string& where,
                    const JsonLimits& limits)
      : root_(root), text_(text), where_(where), limits_(limits) {}

  bool null() { return add(nullptr); }
  bool boolean(bool v) { return add(v); }
  bool number_integer(number_integer_t v) { return add(v); }
  bool number_unsigned(number_unsigned_t v) { return add(v); }
  bool number_float(number_float_t v, const string_t&) { return add(v); }
  bool string(string_t& v) { return add(std::move(v)); }
  bool binary(binary_t& v) { return add(std::move(v)); }
  bool start_object(size_t) { return open(Json::value_t::object); }
  bool start_array(size_t) { return open(Json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    Frame& f = stack_.back();
    f.key = k.size() <= kPathKeyBytes ? k : k.substr(0, kPathKeyBytes) + "...";
    auto& obj = f.value->template get_ref<typename Json::object_t&>();
    if constexpr (std::is_same_v<Json, nlohmann::ordered_json>) {
      slot_ = &ordered_slot(f, obj, std::move(k));
    } else {
      slot_ = &obj[std::move(k)];
    }
    return true;
  }

  template <class Exception>
  bool parse_error(size_t byte, const std::string&, const Exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, ...".
    throw FormatError(where_ + ": malformed JSON at " + position_of(text_, byte) + ": " + e.what() +
                      (stack_.empty() ? "" : " (at " + path() + ")"));
  }

 private:
  static constexpr size_t kPathKeyBytes = 40, kPathParts = 12, kLinearKeys = 16;

  struct Frame {
    Json* value = nullptr;
    size_t count = 0;  // elements so far (arrays: the next index)
    std::string key;   // objects: the key being read, for the error path
    std::unique_ptr<std::unordered_map<std::string, size_t>> index;  // large ordered objects
  };

  template <typename Object>
  Json& ordered_slot(Frame& f, Object& obj, string_t&& k) {
    // The vector under the ordered_map: its operator[] takes an index.
    auto& items = static_cast<typename Object::Container&>(obj);
    if (!f.index && items.size() >= kLinearKeys) {
      f.index = std::make_unique<std::unordered_map<std::string, size_t>>();
      for (size_t i = 0; i < items.size(); ++i) f.index->emplace(items[i].first, i);
    }
    if (f.index) {
      auto [it, added] = f.index->emplace(k, items.size());
      if (!added) return items[it->second].second;
    } else {
      for (auto& kv : items) {
        if (kv.first == k) return kv.second;
      }
    }
    // A new key (nlohmann keeps the first position and the last value).
    items.emplace_back(std::move(k), nullptr);
    return items.back().second;
  }

  // Where the value being added goes: the root, an array's end, or the slot
  // key() made.
  template <typename Value>
  Json* place(Value&& v) {
    if (stack_.empty()) {
      root_ = Json(std::forward<Value>(v));
      return &root_;
    }
    Frame& f = stack_.back();
    ++f.count;
    if (f.value->is_array()) {
      auto& arr = f.value->template get_ref<typename Json::array_t&>();
      arr.emplace_back(std::forward<Value>(v));
      return &arr.back();
    }
    *slot_ = Json(std::forward<Value>(v));
    return slot_;
  }

  template <typename Value>
  bool add(Value&& v) {
    place(std::forward<Value>(v));
    return true;
  }

  bool open(typename Json::value_t type) {
    if (stack_.size() >= limits_.max_depth) {
      throw FormatError(where_ + ": JSON nested deeper than the limit of " +
                        std::to_string(limits_.max_depth) + " levels (at " + path() + ")");
    }
    Json* v = place(type);
    stack_.emplace_back();
    stack_.back().value = v;
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  // "/messages/0/content/0/0/..." down to the value being read (not yet
  // added to the innermost container; each outer one holds its child last).
  std::string path() const {
    std::string out;
    for (size_t i = 0; i < stack_.size() && i < kPathParts; ++i) {
      const Frame& f = stack_[i];
      const size_t index = i + 1 == stack_.size() ? f.count : f.count - 1;
      out += "/" + (f.value->is_array() ? std::to_string(index) : f.key);
    }
    if (stack_.size() > kPathParts) out += "/...";
    return out.empty() ? "/" : out;
  }

  Json& root_;
  std::string_view text_;
  const std::string& where_;
  const JsonLimits& limits_;
  std::vector<Frame> stack_;
  Json* slot_ = nullptr;
};

template <typename Json>
Json parse_bounded(std::string_view text, const std::string& where, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    throw FormatError(where + ": " + std::to_string(text.size()) +
                      " bytes of JSON, over the limit of " + std::to_string(limits.max_bytes) +
                      " bytes");
  }
  Json root;
  BoundedDomBuilder<Json> builder(root, text, where, limits);
  // strict: trailing bytes after the value are an error; comments are not JSON.
  Json::sax_parse(text.data(), text.data() + text.size(), &builder,
                  nlohmann::json::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/false);
  return root;
}

// Appends a compact rendering of `v` to `out` until `out` reaches max_bytes,
// with an explicit stack (no recursion) and no full dump first.
template <typename Json>
std::string excerpt(const Json& v, size_t max_bytes) {
  struct Open {
    const Json* value;
    typename Json::const_iterator it;
  };
  std::string out;
  std::vector<Open> stack;
  auto scalar = [&](const Json& s) {
    if (s.is_string()) {
      // Only the part that can still show is escaped.
      const auto& str = s.template get_ref<const typename Json::string_t&>();
      const size_t room = max_bytes > out.size() ? max_bytes - out.size() : 0;
      out += Json(str.substr(0, room + 1)).dump(-1, ' ', false, Json::error_handler_t::replace);
    } else {
      out += s.dump(-1, ' ', false, Json::error_handler_t::replace);
    }
  };
  auto enter = [&](const Json& x) {
    if (x.is_array() || x.is_object()) {
      out += x.is_array() ? '[' : '{';
      stack.push_back(Open{&x, x.cbegin()});
    } else {
      scalar(x);
    }
  };
  enter(v);
  while (!stack.empty() && out.size() <= max_bytes) {
    Open& top = stack.back();
    if (top.it == top.value->cend()) {
      out += top.value->is_array() ? ']' : '}';
      stack.pop_back();
      continue;
    }
    if (top.it != top.value->cbegin()) out += ',';
    const auto it = top.it++;
    if (top.value->is_object()) {
      scalar(Json(it.key()));
      out += ':';
    }
    enter(*it);  // may grow `stack`: `top` is not used after this
  }
  if (out.size() > max_bytes) {
    out.resize(max_bytes);
    out += "...";
  }
  return out;
}

// Nesting depth of `v` (a scalar is 0, [] is 1), counted without recursion;
// stops counting past `limit`.
template <typename Json>
size_t depth_of(const Json& v, size_t limit) {
  struct Open {
    const Json* value;
    typename Json::const_iterator it;
  };
  if (!v.is_array() && !v.is_object()) return 0;
  std::vector<Open> stack{Open{&v, v.cbegin()}};
  size_t deepest = 1;
  while (!stack.empty()) {
    Open& top = stack.back();
    if (top.it == top.value->cend()) {
      stack.pop_back();
      continue;
    }
    const Json& child = *top.it++;
    if (child.is_array() || child.is_object()) {
      stack.push_back(Open{&child, child.cbegin()});
      deepest = std::max(deepest, stack.size());
      if (deepest > limit) return deepest;
    }
  }
  return deepest;
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& where,
                          const JsonLimits& limits) {
  return parse_bounded<nlohmann::json>(text, where, limits);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where,
                                          const JsonLimits& limits) {
  return parse_bounded<nlohmann::ordered_json>(text, where, limits);
}

std::string json_excerpt(const nlohmann::json& v, size_t max_bytes) {
  return excerpt(v, max_bytes);
}

std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_bytes) {
  return excerpt(v, max_bytes);
}

size_t json_depth(const nlohmann::json& v, size_t limit) { return depth_of(v, limit); }

size_t json_depth(const nlohmann::ordered_json& v, size_t limit) { return depth_of(v, limit); }

}  // namespace hubzoo
