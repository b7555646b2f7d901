#include "server/tool_parser.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/json.h"

namespace hubzoo::server {
namespace {

using OJson = nlohmann::ordered_json;
constexpr std::string_view kSpace = " \t\r\n";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";
constexpr std::string_view kGemmaEscape = "<escape>";
constexpr size_t kMaxToolNameBytes = 256;

std::string_view trim(std::string_view s) {
  const size_t a = s.find_first_not_of(kSpace);
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(kSpace) - a + 1);
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// The longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

std::string compact(const OJson& j) {
  return j.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

std::optional<OJson> parse_json(std::string_view text) {
  try {
    return parse_ordered_json(text, "tool call",
                              JsonLimits{kMaxToolJsonDepth, 2 * kMaxToolCallBytes});
  } catch (const Error&) {
    return std::nullopt;
  }
}

// {"name": "f", "arguments": {..}} (or "parameters", Llama 3's key); the
// arguments may also be a string holding a JSON object, or absent ({}).
// `strict` (an untagged call): "arguments" must be there.
std::optional<ParsedToolCall> call_from_object(const OJson& j, bool strict) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return std::nullopt;
  ParsedToolCall call{name->get<std::string>(), "{}"};
  if (call.name.empty() || call.name.size() > kMaxToolNameBytes) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (strict && args == j.end()) return std::nullopt;
  if (args == j.end() || args->is_null()) return call;
  if (args->is_object()) {
    call.arguments = compact(*args);
  } else if (args->is_string()) {
    const auto inner = parse_json(args->get<std::string>());
    if (!inner || !inner->is_object()) return std::nullopt;
    call.arguments = compact(*inner);
  } else {
    return std::nullopt;
  }
  return call;
}

// One call object, or a non-empty list of them.
std::optional<std::vector<ParsedToolCall>> calls_from_json(std::string_view text,
                                                           bool strict = false) {
  const auto j = parse_json(trim(text));
  if (!j) return std::nullopt;
  std::vector<ParsedToolCall> out;
  if (j->is_array()) {
    if (j->empty() || j->size() > kMaxToolCalls) return std::nullopt;
    for (const auto& item : *j) {
      auto c = call_from_object(item, strict);
      if (!c) return std::nullopt;
      out.push_back(std::move(*c));
    }
    return out;
  }
  auto c = call_from_object(*j, strict);
  if (!c) return std::nullopt;
  out.push_back(std::move(*c));
  return out;
}

// FunctionGemma's argument syntax: {key:value,...} where a string is
// <escape>text<escape> and other values are written as in JSON. Recursion is
// bounded by kMaxToolJsonDepth.
struct GemmaReader {
  std::string_view s;
  size_t i = 0;

  void skip_space() {
    while (i < s.size() && kSpace.find(s[i]) != std::string_view::npos) ++i;
  }
  bool eat(char c) {
    skip_space();
    if (i < s.size() && s[i] == c) return ++i, true;
    return false;
  }
  std::optional<std::string> escaped() {
    if (!starts_with(s.substr(i), kGemmaEscape)) return std::nullopt;
    const size_t start = i + kGemmaEscape.size();
    const size_t stop = s.find(kGemmaEscape, start);
    if (stop == std::string_view::npos) return std::nullopt;
    i = stop + kGemmaEscape.size();
    return std::string(s.substr(start, stop - start));
  }
  // A bare token: up to the next delimiter.
  std::string_view bare() {
    const size_t start = i;
    while (i < s.size() && std::string_view(",:{}[]<").find(s[i]) == std::string_view::npos) ++i;
    return trim(s.substr(start, i - start));
  }
  std::optional<OJson> value(size_t depth) {
    if (depth > kMaxToolJsonDepth) return std::nullopt;
    skip_space();
    if (i >= s.size()) return std::nullopt;
    if (s[i] == '{') return object(depth + 1);
    if (s[i] == '[') {
      ++i;
      OJson arr = OJson::array();
      if (eat(']')) return arr;
      do {
        auto v = value(depth + 1);
        if (!v) return std::nullopt;
        arr.push_back(std::move(*v));
      } while (eat(','));
      if (!eat(']')) return std::nullopt;
      return arr;
    }
    if (auto text = escaped()) return OJson(std::move(*text));
    const std::string_view token = bare();
    if (token.empty()) return std::nullopt;
    if (auto j = parse_json(token); j && j->is_primitive() && !j->is_string()) return j;
    return OJson(std::string(token));  // a word the model did not escape: a string
  }
  std::optional<OJson> object(size_t depth) {
    if (depth > kMaxToolJsonDepth || !eat('{')) return std::nullopt;
    OJson obj = OJson::object();
    if (eat('}')) return obj;
    do {
      skip_space();
      std::optional<std::string> key = escaped();
      if (!key) key = std::string(bare());
      if (key->empty() || !eat(':')) return std::nullopt;
      auto v = value(depth);
      if (!v) return std::nullopt;
      obj[*key] = std::move(*v);
    } while (eat(','));
    if (!eat('}')) return std::nullopt;
    return obj;
  }
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

std::optional<std::vector<ParsedToolCall>> parse_gemma(std::string_view body) {
  body = trim(body);
  if (!starts_with(body, "call:")) return std::nullopt;
  body.remove_prefix(5);
  size_t n = 0;
  while (n < body.size() && is_name_char(body[n])) ++n;
  if (n == 0 || n > kMaxToolNameBytes) return std::nullopt;
  GemmaReader r{body, n};
  auto args = r.object(0);
  if (!args) return std::nullopt;
  r.skip_space();
  if (r.i != body.size()) return std::nullopt;
  return std::vector<ParsedToolCall>{{std::string(body.substr(0, n)), compact(*args)}};
}

// `name[ARGS]{..}` or `name[CALL_ID]id[ARGS]{..}` (Mistral tokenizer v11+).
std::optional<std::vector<ParsedToolCall>> parse_mistral_args_form(std::string_view body) {
  const size_t args = body.find(kMistralArgs);
  if (args == std::string_view::npos) return std::nullopt;
  std::string_view name = body.substr(0, args);
  if (const size_t id = name.find(kMistralCallId); id != std::string_view::npos) {
    name = name.substr(0, id);
  }
  name = trim(name);
  if (name.empty() || name.size() > kMaxToolNameBytes) return std::nullopt;
  for (char c : name) {
    if (!is_name_char(c)) return std::nullopt;
  }
  const auto j = parse_json(trim(body.substr(args + kMistralArgs.size())));
  if (!j || !j->is_object()) return std::nullopt;
  return std::vector<ParsedToolCall>{{std::string(name), compact(*j)}};
}

constexpr std::string_view kFence = "```";

// An untagged Hermes call: {"name", "arguments"} objects, perhaps in a ```json
// fence, each naming one of `tool_names` (when given).
std::optional<std::vector<ParsedToolCall>> parse_untagged(
    std::string_view region, const std::vector<std::string>& tool_names) {
  region = trim(region);
  if (starts_with(region, kFence)) {
    const size_t nl = region.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    const std::string_view lang = trim(region.substr(kFence.size(), nl - kFence.size()));
    if (!lang.empty() && lang != "json") return std::nullopt;
    region.remove_prefix(nl + 1);
    region = trim(region);
    if (region.size() >= kFence.size() && region.substr(region.size() - kFence.size()) == kFence) {
      region.remove_suffix(kFence.size());
    }
  }
  auto calls = calls_from_json(region, /*strict=*/true);
  if (!calls || tool_names.empty()) return calls;
  for (const auto& c : *calls) {
    if (std::find(tool_names.begin(), tool_names.end(), c.name) == tool_names.end()) {
      return std::nullopt;
    }
  }
  return calls;
}

}  // namespace

size_t ToolCallParser::JsonScan::advance(std::string_view s, bool& bad) {
  bad = false;
  if (found != std::string_view::npos) return found;
  if (!begun) {
    const size_t at = s.find_first_not_of(kSpace, std::max(pos, start));
    if (at == std::string_view::npos) {
      pos = s.size();
      return std::string_view::npos;
    }
    if (s[at] != '{' && s[at] != '[') {
      bad = true;
      return std::string_view::npos;
    }
    begun = true;
    pos = at;
  }
  for (; pos < s.size(); ++pos) {
    const char c = s[pos];
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return found = ++pos;
    }
  }
  return std::string_view::npos;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3:
      return "llama3";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kGemma:
      return "gemma";
    case ToolFormat::kNone:
      break;
  }
  return "none";
}

std::optional<ToolFormat> tool_format_from_name(std::string_view name) {
  if (name == "none") return ToolFormat::kNone;
  if (name == "hermes" || name == "qwen" || name == "smollm3") return ToolFormat::kHermes;
  if (name == "llama3") return ToolFormat::kLlama3;
  if (name == "mistral") return ToolFormat::kMistral;
  if (name == "gemma") return ToolFormat::kGemma;
  return std::nullopt;
}

const char* tool_format_names() {
  return "auto, hermes (qwen, smollm3), llama3, mistral, gemma, none";
}

ToolFormat detect_tool_format(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has("[TOOL_CALLS]")) return ToolFormat::kMistral;
  if (has("<start_function_call>")) return ToolFormat::kGemma;
  if (has("<tool_call>")) return ToolFormat::kHermes;
  // Llama 3.1/3.2/3.3: JSON with "parameters", <|python_tag|> for built-in tools.
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("\"parameters\""))) {
    return ToolFormat::kLlama3;
  }
  return ToolFormat::kNone;
}

ToolCallSyntax tool_call_syntax(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return {"<tool_call>", "</tool_call>", false, "name", "arguments", false};
    case ToolFormat::kLlama3:
      return {"{", "", false, "name", "parameters", true};
    case ToolFormat::kMistral:
      return {"[TOOL_CALLS]", "", true, "name", "arguments", false};
    case ToolFormat::kGemma:
      return {"<start_function_call>", "<end_function_call>", false, "", "", false};
    case ToolFormat::kNone:
      break;
  }
  return {};
}

std::optional<std::vector<ParsedToolCall>> parse_tool_call_region(
    ToolFormat format, std::string_view region, const std::vector<std::string>& tool_names) {
  const ToolCallSyntax syn = tool_call_syntax(format);
  if (format == ToolFormat::kHermes && !starts_with(region, syn.begin)) {
    return parse_untagged(region, tool_names);
  }
  switch (format) {
    case ToolFormat::kHermes:
    case ToolFormat::kGemma: {
      if (!starts_with(region, syn.begin)) return std::nullopt;
      region.remove_prefix(syn.begin.size());
      if (region.size() >= syn.end.size() &&
          region.substr(region.size() - syn.end.size()) == syn.end) {
        region.remove_suffix(syn.end.size());
      }
      return format == ToolFormat::kGemma ? parse_gemma(region) : calls_from_json(region);
    }
    case ToolFormat::kLlama3: {
      region = trim(region);
      if (starts_with(region, kPythonTag)) region.remove_prefix(kPythonTag.size());
      region = trim(region);
      if (!starts_with(region, "{")) return std::nullopt;
      return calls_from_json(region);
    }
    case ToolFormat::kMistral: {
      if (!starts_with(region, syn.begin)) return std::nullopt;
      region = trim(region.substr(syn.begin.size()));
      if (starts_with(region, "[") && !starts_with(region, kMistralArgs)) {
        auto calls = calls_from_json(region);
        if (calls && parse_json(region)->is_array()) return calls;
        return std::nullopt;
      }
      return parse_mistral_args_form(region);
    }
    case ToolFormat::kNone:
      break;
  }
  return std::nullopt;
}

ToolCallParser::ToolCallParser(ToolFormat format, std::vector<std::string> tool_names)
    : format_(format), syntax_(tool_call_syntax(format)), tool_names_(std::move(tool_names)) {
  if (format == ToolFormat::kNone) state_ = State::kPassThrough;
}

ToolParseDelta ToolCallParser::feed(std::string_view text) {
  pending_.append(text);
  ToolParseDelta out;
  step(out, false);
  return out;
}

ToolParseDelta ToolCallParser::finish() {
  ToolParseDelta out;
  step(out, true);
  if (!pending_.empty()) emit_content(out, pending_);  // nothing is dropped
  pending_.clear();
  // Whitespace next to calls goes; an answer without calls keeps all of it.
  if (calls_ == 0) out.content += held_ws_;
  held_ws_.clear();
  return out;
}

void ToolCallParser::step(ToolParseDelta& out, bool at_end) {
  // Each round consumes text or changes state; it stops when it needs more.
  for (;;) {
    bool progress = false;
    if (state_ == State::kPassThrough) {
      emit_content(out, pending_);
      pending_.clear();
    } else if (state_ == State::kText) {
      progress = step_text(out, at_end);
    } else {
      progress = step_call(out, at_end);
    }
    if (!progress) return;
  }
}

bool ToolCallParser::step_text(ToolParseDelta& out, bool at_end) {
  if (pending_.empty()) return false;
  if (format_ == ToolFormat::kLlama3) {
    // A call is the whole answer (or follows a call after ';' or whitespace).
    if (seen_text_) {
      state_ = State::kPassThrough;
      return true;
    }
    size_t i = 0;
    while (i < pending_.size() && (kSpace.find(pending_[i]) != std::string_view::npos ||
                                   (calls_ > 0 && pending_[i] == ';'))) {
      ++i;
    }
    std::string lead = pending_.substr(0, i);
    if (calls_ > 0) std::erase(lead, ';');  // the separator between calls
    emit_content(out, lead);
    pending_.erase(0, i);
    if (pending_.empty()) return false;
    const std::string_view rest = pending_;
    if (rest[0] == '{' || starts_with(rest, kPythonTag)) {
      state_ = State::kCall;
      json_ = JsonScan{};
      return true;
    }
    if (!at_end && kPythonTag.substr(0, rest.size()) == rest) return false;  // maybe the tag
    state_ = State::kPassThrough;
    return true;
  }
  if (format_ == ToolFormat::kHermes && !seen_text_) {
    // An answer that starts with '{' or a fence may be an untagged call.
    const size_t i = pending_.find_first_not_of(kSpace);
    if (i == std::string::npos) {
      emit_content(out, pending_);  // held: whitespace waits
      pending_.clear();
      return false;
    }
    const std::string_view rest = std::string_view(pending_).substr(i);
    if (rest[0] == '{' || starts_with(rest, kFence)) {
      emit_content(out, std::string_view(pending_).substr(0, i));
      pending_.erase(0, i);
      state_ = State::kCall;
      bare_ = true;
      json_ = JsonScan{};
      return true;
    }
    if (!at_end && kFence.substr(0, rest.size()) == rest) return false;  // maybe a fence
  }
  const size_t at = pending_.find(syntax_.begin);
  if (at != std::string::npos) {
    emit_content(out, std::string_view(pending_).substr(0, at));
    pending_.erase(0, at);
    state_ = State::kCall;
    scan_ = syntax_.begin.size();
    bare_ = false;
    json_ = JsonScan{};
    return true;
  }
  const size_t keep = at_end ? 0 : partial_marker(pending_, syntax_.begin);
  emit_content(out, std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return false;
}

size_t ToolCallParser::region_end(bool at_end) {
  constexpr size_t npos = std::string::npos;
  const std::string_view s = pending_;
  if (bare_) return untagged_end(at_end);
  if (!syntax_.end.empty()) {  // Hermes, Gemma: up to the end marker
    const size_t from = std::max(syntax_.begin.size(), scan_);
    const size_t at = s.find(syntax_.end, from);
    if (at != npos) return at + syntax_.end.size();
    scan_ = s.size() >= syntax_.end.size() ? s.size() - syntax_.end.size() + 1 : 0;
    return at_end ? s.size() : npos;
  }
  // Llama 3 and Mistral: up to the end of the JSON value, scanned once.
  if (json_.start == npos) {
    size_t start = 0;
    if (format_ == ToolFormat::kLlama3) {
      if (starts_with(s, kPythonTag)) start = kPythonTag.size();
    } else {  // Mistral: [TOOL_CALLS] [..] or [TOOL_CALLS]name[ARGS]{..}
      start = syntax_.begin.size();
      const size_t first = s.find_first_not_of(kSpace, start);
      if (first == npos) return at_end ? s.size() : npos;
      if (s[first] != '[' || starts_with(s.substr(first), kMistralArgs)) {
        const size_t args = s.find(kMistralArgs, start);
        if (args == npos) {
          const bool too_long = s.size() - start > 2 * kMaxToolNameBytes;
          return at_end || too_long ? s.size() : npos;  // the parse then fails
        }
        start = args + kMistralArgs.size();
      }
    }
    json_ = JsonScan{};
    json_.start = start;
  }
  bool bad = false;
  const size_t end = json_.advance(s, bad);
  if (bad || (end == npos && at_end)) return s.size();  // the parse decides
  return end;
}

size_t ToolCallParser::untagged_end(bool at_end) {
  constexpr size_t npos = std::string::npos;
  const std::string_view s = pending_;
  if (json_.start == npos) {
    size_t start = 0;
    if (starts_with(s, kFence)) {  // ```json\n{..}\n```
      const size_t nl = s.find('\n');
      if (nl == npos) return at_end || s.size() > 16 ? s.size() : npos;  // the parse then fails
      start = nl + 1;
    }
    json_ = JsonScan{};
    json_.start = start;
  }
  bool bad = false;
  const size_t end = json_.advance(s, bad);
  if (bad || (end == npos && at_end)) return s.size();
  if (end == npos || !starts_with(s, kFence)) return end;
  // A fenced call ends with the closing fence (or the answer).
  const size_t close = s.find_first_not_of(kSpace, end);
  if (close == npos) return at_end ? s.size() : npos;
  const std::string_view tail = s.substr(close);
  if (starts_with(tail, kFence)) return close + kFence.size();
  if (!at_end && tail.size() < kFence.size() && kFence.substr(0, tail.size()) == tail) return npos;
  return end;
}

bool ToolCallParser::step_call(ToolParseDelta& out, bool at_end) {
  size_t end = region_end(at_end);
  if (end == std::string::npos) {
    if (pending_.size() <= kMaxToolCallBytes) return false;
    fail_region(out, pending_.size());  // too long to be a call
    return true;
  }
  if (end > kMaxToolCallBytes) {
    fail_region(out, end);
    return true;
  }
  auto calls =
      parse_tool_call_region(format_, std::string_view(pending_).substr(0, end), tool_names_);
  if (!calls || calls_ + calls->size() > kMaxToolCalls) {
    fail_region(out, end);
    return true;
  }
  held_ws_.clear();  // whitespace between content (or a call) and this call
  after_call_ = true;
  calls_ += calls->size();
  for (auto& c : *calls) out.calls.push_back(std::move(c));
  pending_.erase(0, end);
  state_ = State::kText;
  return true;
}

void ToolCallParser::fail_region(ToolParseDelta& out, size_t length) {
  emit_content(out, std::string_view(pending_).substr(0, length));
  pending_.erase(0, length);
  // Llama 3: once the answer is not calls, it is all content.
  state_ = format_ == ToolFormat::kLlama3 ? State::kPassThrough : State::kText;
}

void ToolCallParser::emit_content(ToolParseDelta& out, std::string_view text) {
  if (after_call_) {  // whitespace right after a call goes with it
    const size_t first = text.find_first_not_of(kSpace);
    if (first == std::string_view::npos) return;
    text.remove_prefix(first);
    after_call_ = false;
  }
  std::string all = held_ws_;
  all.append(text);
  held_ws_.clear();
  const size_t last = all.find_last_not_of(kSpace);
  if (last == std::string::npos) {
    held_ws_ = std::move(all);
    return;
  }
  // Content released after calls: the calls were already sent, so it goes in
  // output order after them (the caller streams delta.content first).
  out.content.append(all, 0, last + 1);
  held_ws_ = all.substr(last + 1);
  seen_text_ = true;
}

}  // namespace hubzoo::server
