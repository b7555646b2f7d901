// quantization_config of config.json -> HubQuantSpec. Every option that
// changes the math and is not implemented is a ConfigError naming it;
// calibration-only options (damp_percent, observer, ...) are ignored.
#include <algorithm>
#include <cctype>
#include <regex>

#include "base/error.h"
#include "layers/hub_quant_spec.h"

namespace hubzoo {
namespace {

// Bounds on the lists and patterns a config may hold (real ones have a few
// entries); a regex of the config is compiled only once it is within them.
constexpr size_t kMaxListEntries = 100000;
constexpr size_t kMaxPatternBytes = 1024;
constexpr size_t kMaxSchemes = 64;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

[[noreturn]] void fail(const JsonObject& q, const std::string& field, const std::string& why) {
  throw ConfigError(q.where() + ": field '" + field + "' " + why);
}

std::vector<std::string> string_list(const JsonObject& q, const std::string& key) {
  auto v = q.get_or<std::vector<std::string>>(key, {});
  if (v.size() > kMaxListEntries) fail(q, key, "has too many entries");
  for (const std::string& s : v) {
    if (s.size() > kMaxPatternBytes) fail(q, key, "has an entry over 1024 bytes");
  }
  return v;
}

int64_t group_size_field(const JsonObject& q, bool allow_per_channel) {
  const auto g = q.get<int64_t>("group_size");
  if (g == -1 && allow_per_channel) return g;
  if (g <= 0 || g % 32 != 0 || g > (int64_t{1} << 30)) {
    fail(q, "group_size",
         "must be " + std::string(allow_per_channel ? "-1 or " : "") +
             "a positive multiple of 32 (hubzoo's blocks are 32 weights), got " +
             std::to_string(g));
  }
  return g;
}

void require_bits(const JsonObject& q, const std::string& key, int want) {
  const auto bits = q.get<int64_t>(key);
  if (bits != want) {
    fail(q, key,
         "must be " + std::to_string(want) + " (hubzoo reads " + std::to_string(want) + "-bit " +
             "weights of this method), got " + std::to_string(bits));
  }
}

// A field that must be absent, null, empty or one of `ok` (lower-cased).
void require_unset(const JsonObject& q, const std::string& key, const std::string& why) {
  if (!q.has(key)) return;
  const nlohmann::json& v = q.json()[key];
  if ((v.is_object() || v.is_array()) && v.empty()) return;
  if (v.is_boolean() && !v.get<bool>()) return;
  throw ConfigError(q.where() + ": field '" + key + "' is not supported (" + why + "), got " +
                    json_excerpt(v));
}

// --- compressed-tensors -----------------------------------------------------

CtFormat ct_format(const JsonObject& where, const std::string& field, const std::string& f) {
  if (f == "pack-quantized") return CtFormat::kPackQuantized;
  if (f == "int-quantized" || f == "naive-quantized") return CtFormat::kIntQuantized;
  fail(where, field,
       "'" + f +
           "' is not supported (hubzoo reads pack-quantized, int-quantized and "
           "naive-quantized int4/int8 weights)");
}

// std::regex backtracks: a quantified group ("(a+)+") or many unbounded
// quantifiers make a match exponential or a high power of the name's length.
// Real configs use a few ".*" and no quantified groups; anything beyond that
// is refused, so matching a module name stays within ~60^4 steps.
constexpr int kMaxQuantifiers = 4;

std::string pattern_problem(const std::string& p) {
  int quantifiers = 0;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;  // an escaped character is a literal
      continue;
    }
    if (in_class) {
      in_class = c != ']';
      continue;
    }
    if (c == '[') in_class = true;
    if (c != '*' && c != '+' && c != '?' && c != '{') continue;
    if (i > 0 && p[i - 1] == ')') return "a quantified group";
    if (c == '?' && i > 0 && (p[i - 1] == '*' || p[i - 1] == '+' || p[i - 1] == '?')) continue;
    if (++quantifiers > kMaxQuantifiers) return "more than 4 quantifiers";
  }
  return "";
}

void check_ct_target(const JsonObject& where, const std::string& field, const std::string& t) {
  if (t.rfind("re:", 0) == 0) {
    const std::string problem = pattern_problem(t.substr(3));
    if (!problem.empty()) {
      fail(where, field, "pattern '" + t + "' has " + problem + " (not supported)");
    }
    try {
      std::regex re(t.substr(3), std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail(where, field, "has an invalid pattern '" + t + "': " + e.what());
    }
    return;
  }
  // A module class other than Linear (e.g. "Embedding"): hubzoo quantizes
  // linears only. Module names are lower-case dotted paths.
  if (t != "Linear" && !t.empty() && std::isupper(static_cast<unsigned char>(t[0])) &&
      t.find('.') == std::string::npos) {
    fail(where, field, "names module class '" + t + "'; only 'Linear' is supported");
  }
}

CtScheme parse_ct_scheme(const std::string& name, const JsonObject& s,
                         const std::optional<CtFormat>& top_format) {
  CtScheme out;
  out.name = name;
  out.targets = string_list(s, "targets");
  if (out.targets.empty()) fail(s, "targets", "is missing or empty");
  for (const std::string& t : out.targets) check_ct_target(s, "targets", t);
  require_unset(s, "input_activations",
                "activation quantization (W8A8 and the like) is not implemented; "
                "hubzoo runs weight-only schemes");
  require_unset(s, "output_activations", "output quantization is not implemented");
  if (s.has("format")) {
    out.format = ct_format(s, "format", s.get<std::string>("format"));
  } else if (top_format) {
    out.format = *top_format;
  } else {
    fail(s, "format", "is missing (the config's format is mixed-precision)");
  }
  const auto w = s.object("weights");
  if (!w) fail(s, "weights", "is missing (a weight-only scheme needs weights)");
  const auto bits = w->get<int64_t>("num_bits");
  if (bits != 4 && bits != 8) {
    fail(*w, "num_bits", "must be 4 or 8, got " + std::to_string(bits));
  }
  out.bits = static_cast<int>(bits);
  const std::string type = w->get_or<std::string>("type", "int");
  if (type != "int") fail(*w, "type", "'" + type + "' is not supported (int only)");
  out.symmetric = w->get_or<bool>("symmetric", true);
  if (w->get_or<bool>("dynamic", false)) fail(*w, "dynamic", "true is not supported");
  require_unset(*w, "block_structure", "block quantization is not implemented");
  if (w->has("actorder")) {
    const std::string a = w->get<std::string>("actorder");
    // "weight" reorders columns during calibration only; "group" stores a g_idx
    // the package itself no longer reads.
    if (a != "weight" && a != "static") fail(*w, "actorder", "'" + a + "' is not supported");
  }
  const std::string strategy = w->get_or<std::string>("strategy", "tensor");
  if (strategy == "group") {
    out.strategy = CtStrategy::kGroup;
    out.group_size = group_size_field(*w, false);
  } else if (strategy == "channel") {
    out.strategy = CtStrategy::kChannel;
  } else if (strategy == "tensor") {
    out.strategy = CtStrategy::kTensor;
    if (!out.symmetric && out.format == CtFormat::kPackQuantized) {
      fail(*w, "symmetric", "false with strategy 'tensor' is not supported for pack-quantized");
    }
  } else {
    fail(*w, "strategy", "'" + strategy + "' is not supported (group, channel or tensor)");
  }
  return out;
}

}  // namespace

HubQuantSpec parse_gptq_config(const JsonObject& q) {
  HubQuantSpec s;
  s.method = HubQuantMethod::kGptq;
  s.where = q.where();
  require_bits(q, "bits", 4);
  s.group_size = group_size_field(q, true);
  s.desc_act = q.get_or<bool>("desc_act", false);
  s.sym = q.get_or<bool>("sym", true);
  // "format" (transformers >= 5) or the legacy "checkpoint_format".
  std::string key = q.has("checkpoint_format") ? "checkpoint_format" : "format";
  const std::string f = lower(q.get_or<std::string>(key, "gptq"));
  if (f == "gptq") {
    s.gptq_v1_zeros = true;
  } else if (f == "gptq_v2") {
    s.gptq_v1_zeros = false;
  } else {
    fail(q, key, "'" + f + "' is not supported (gptq or gptq_v2)");
  }
  if (q.has("pack_dtype") && q.get<std::string>("pack_dtype") != "int32") {
    fail(q, "pack_dtype", "must be int32");
  }
  return s;
}

HubQuantSpec parse_awq_config(const JsonObject& q) {
  HubQuantSpec s;
  s.method = HubQuantMethod::kAwq;
  s.where = q.where();
  require_bits(q, "bits", 4);
  s.group_size = group_size_field(q, false);
  // "format" (transformers >= 5) or the legacy "version".
  const std::string key = q.has("version") ? "version" : "format";
  const std::string v = lower(q.get_or<std::string>(key, "gemm"));
  if (v != "gemm") {
    fail(q, key, "'" + v + "' is not supported (hubzoo reads AWQ's GEMM layout)");
  }
  if (!q.get_or<bool>("zero_point", true)) {
    fail(q, "zero_point", "false is not supported (AWQ GEMM checkpoints store zero points)");
  }
  return s;
}

HubQuantSpec parse_ct_config(const JsonObject& q) {
  HubQuantSpec s;
  s.method = HubQuantMethod::kCompressedTensors;
  s.where = q.where();
  const std::string status = q.get<std::string>("quantization_status");
  if (status != "compressed") {
    fail(q, "quantization_status", "'" + status + "' is not supported (compressed only)");
  }
  std::optional<CtFormat> top;
  const std::string format = q.get<std::string>("format");
  if (format != "mixed-precision") top = ct_format(q, "format", format);
  require_unset(q, "kv_cache_scheme", "KV-cache quantization is not implemented");
  require_unset(q, "sparsity_config", "sparse checkpoints are not implemented");
  require_unset(q, "transform_config", "transforms are not implemented");
  require_unset(q, "moe_sparsity_config", "expert sparsity is not implemented");
  s.ignore = string_list(q, "ignore");
  for (const std::string& t : s.ignore) check_ct_target(q, "ignore", t);
  if (!q.has("config_groups") || !q.json()["config_groups"].is_object() ||
      q.json()["config_groups"].empty()) {
    fail(q, "config_groups", "must be a non-empty object");
  }
  const nlohmann::json& groups = q.json()["config_groups"];
  if (groups.size() > kMaxSchemes) fail(q, "config_groups", "has too many groups");
  for (const auto& [name, value] : groups.items()) {
    if (!value.is_object()) {
      fail(q, "config_groups." + name,
           "must be a scheme object (preset names are resolved by the package that "
           "writes the checkpoint), got " +
               json_excerpt(value));
    }
    JsonObject scheme(value, q.where() + ".config_groups." + name);
    s.schemes.push_back(parse_ct_scheme(name, scheme, top));
  }
  return s;
}

namespace {

// compressed-tensors' match_name: "re:<pattern>" is Python's re.match (anchored
// at the start), anything else an exact module name; "Linear" is every linear.
bool ct_matches(const std::string& module, const std::string& target) {
  if (target == "Linear") return true;
  if (target.rfind("re:", 0) == 0) {
    const std::regex re(target.substr(3), std::regex::ECMAScript);
    return std::regex_search(module, re, std::regex_constants::match_continuous);
  }
  return module == target;
}

bool ct_matches_any(const std::string& module, const std::vector<std::string>& targets) {
  return std::any_of(targets.begin(), targets.end(),
                     [&](const std::string& t) { return ct_matches(module, t); });
}

}  // namespace

const CtScheme* HubQuantSpec::ct_scheme_for(const std::string& module) const {
  if (ct_matches_any(module, ignore)) return nullptr;
  const CtScheme* found = nullptr;
  for (const CtScheme& s : schemes) {
    if (!ct_matches_any(module, s.targets)) continue;
    if (found) {
      throw ConfigError(where + ": config_groups '" + found->name + "' and '" + s.name +
                        "' both target " + module);
    }
    found = &s;
  }
  return found;
}

std::optional<HubQuant> HubQuant::from_config(const JsonObject& config) {
  const auto q = config.object("quantization_config");
  if (!q) return std::nullopt;
  const JsonObject qc(q->json(), config.where() + ": quantization_config");
  const std::string method = qc.get<std::string>("quant_method");
  HubQuantSpec spec;
  if (method == "compressed-tensors") {
    spec = parse_ct_config(qc);
  } else if (method == "gptq") {
    spec = parse_gptq_config(qc);
  } else if (method == "awq") {
    spec = parse_awq_config(qc);
  } else {
    throw ConfigError(qc.where() + ": field 'quant_method' '" + method +
                      "' is not supported (compressed-tensors, gptq or awq)");
  }
  return HubQuant(std::make_shared<const HubQuantSpec>(std::move(spec)));
}

HubQuantMethod HubQuant::method() const { return spec_->method; }

std::string HubQuant::describe() const {
  const HubQuantSpec& s = *spec_;
  if (s.method == HubQuantMethod::kGptq) {
    return "gptq int4 " +
           (s.group_size < 0 ? std::string("per channel")
                             : "group " + std::to_string(s.group_size)) +
           (s.desc_act ? " desc_act" : "") + (s.gptq_v1_zeros ? " v1" : " v2");
  }
  if (s.method == HubQuantMethod::kAwq) {
    return "awq gemm int4 group " + std::to_string(s.group_size);
  }
  std::string out = "compressed-tensors";
  for (const CtScheme& c : s.schemes) {
    out += " " + c.name + ":int" + std::to_string(c.bits) +
           (c.format == CtFormat::kPackQuantized ? " packed" : "") +
           (c.strategy == CtStrategy::kGroup     ? " group " + std::to_string(c.group_size)
            : c.strategy == CtStrategy::kChannel ? std::string(" channel")
                                                 : std::string(" tensor")) +
           (c.symmetric ? " sym" : " asym");
  }
  return out;
}

}  // namespace hubzoo
