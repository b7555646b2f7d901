#include "layers/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

#include "base/error.h"
#include "ops/bf16.h"

namespace hubzoo {
namespace {

// Keys each rope type may carry; anything else would be silently ignored.
std::set<std::string> allowed_keys(const std::string& type, const RopeParseOptions& opt) {
  static const std::map<std::string, std::set<std::string>> extra = {
      {"default", {}},
      {"linear", {"factor"}},
      {"llama3",
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}},
      {"yarn",
       {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
        "original_max_position_embeddings", "truncate"}},
      {"proportional", {"factor", "partial_rotary_factor"}},
      {"longrope",
       {"factor", "attention_factor", "short_factor", "long_factor",
        "original_max_position_embeddings"}},
  };
  std::set<std::string> keys = {"rope_type", "type", "rope_theta"};
  keys.insert(extra.at(type).begin(), extra.at(type).end());
  if (opt.partial_rotary) keys.insert("partial_rotary_factor");
  return keys;
}

// longrope's factor lists: numbers > 0 (their length is checked against the
// rotary dim when the Rope is built).
std::vector<double> longrope_factors(const JsonObject& r, const std::string& field,
                                     const char* key) {
  if (!r.has(key) || !r.json()[key].is_array()) {
    throw ConfigError(r.where() + ": " + field + "." + key + " must be a list of numbers");
  }
  std::vector<double> out;
  for (const auto& v : r.json()[key]) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      throw ConfigError(r.where() + ": " + field + "." + key + " must hold numbers > 0");
    }
    out.push_back(v.get<double>());
  }
  return out;
}

// The partial rotary factor (in the rope dict, else top level), in (0, 1].
double partial_rotary_factor(const JsonObject& config, const JsonObject* rope,
                             const RopeParseOptions& opt) {
  double f = config.get_or<double>("partial_rotary_factor", 1.0);
  if (rope) f = rope->get_or<double>("partial_rotary_factor", f);
  if (f != 1.0 && !opt.partial_rotary) {
    throw ConfigError(config.where() + ": partial_rotary_factor != 1 is not supported");
  }
  if (!(f > 0 && f <= 1)) {
    throw ConfigError(config.where() + ": partial_rotary_factor must be in (0, 1]");
  }
  return f;
}

// The type's own fields (type already checked, keys allowed).
void parse_type_fields(const JsonObject& config, const JsonObject& r, const std::string& field,
                       RopeParams& p) {
  const int64_t max_pos = config.get_or<int64_t>("max_position_embeddings", 2048);
  if (p.type == "linear" || p.type == "llama3") p.factor = r.get<double>("factor");
  if (p.type == "llama3") {
    p.low_freq_factor = r.get<double>("low_freq_factor");
    p.high_freq_factor = r.get<double>("high_freq_factor");
  }
  if (p.type == "llama3" || p.type == "yarn" || p.type == "longrope") {
    // transformers prefers a top-level original_max_position_embeddings (Phi3 style).
    p.original_max_position_embeddings =
        config.get_or<int64_t>("original_max_position_embeddings",
                               r.get_or<int64_t>("original_max_position_embeddings", max_pos));
    if (p.original_max_position_embeddings <= 0) {
      throw ConfigError(config.where() + ": original_max_position_embeddings must be positive");
    }
  }
  if (p.type == "proportional") {
    p.factor = r.get_or<double>("factor", 1.0);
    p.partial_rotary_factor = r.get_or<double>("partial_rotary_factor", 1.0);
    if (!(p.partial_rotary_factor >= 0 && p.partial_rotary_factor <= 1)) {
      throw ConfigError(config.where() + ": " + field + " partial_rotary_factor must be in [0, 1]");
    }
  }
  if (p.type == "yarn" || p.type == "longrope") {
    auto factor = r.maybe<double>("factor");
    p.factor = factor ? *factor
                      : static_cast<double>(max_pos) /
                            static_cast<double>(p.original_max_position_embeddings);
    p.attention_factor = r.maybe<double>("attention_factor");
  }
  if (p.type == "longrope") {
    p.short_factor = longrope_factors(r, field, "short_factor");
    p.long_factor = longrope_factors(r, field, "long_factor");
  }
  if (p.type == "yarn") {
    p.mscale = r.maybe<double>("mscale");
    p.mscale_all_dim = r.maybe<double>("mscale_all_dim");
    // transformers: `get("beta_fast") or 32`, so 0 also means the default.
    auto beta_fast = r.maybe<double>("beta_fast");
    auto beta_slow = r.maybe<double>("beta_slow");
    if (beta_fast && *beta_fast != 0) p.beta_fast = *beta_fast;
    if (beta_slow && *beta_slow != 0) p.beta_slow = *beta_slow;
    p.truncate = r.get_or<bool>("truncate", true);
  }
}

}  // namespace

RopeParams parse_rope_params(const JsonObject& config) { return parse_rope_params(config, {}); }

RopeParams parse_rope_params(const JsonObject& config, const RopeParseOptions& opt) {
  RopeParams p;
  p.theta = config.get_or<double>("rope_theta", 10000.0);
  std::optional<JsonObject> rope = config.object("rope_parameters");
  std::string field = "rope_parameters";
  if (!rope) {
    rope = config.object("rope_scaling");
    field = "rope_scaling";
  }
  if (!rope) {
    p.partial_rotary_factor = partial_rotary_factor(config, nullptr, opt);
    return p;
  }
  const JsonObject& r = *rope;
  for (const auto& [key, value] : r.json().items()) {
    if (value.is_object()) {
      throw ConfigError(config.where() + ": per-layer-type " + field + " ('" + key +
                        "') is not supported for this architecture");
    }
  }
  p.type = r.get_or<std::string>("rope_type", r.get_or<std::string>("type", "default"));
  // Phi-3's older configs spell longrope "su" or "yarn" (Phi3Config renames both).
  if (opt.longrope && (p.type == "su" || p.type == "yarn")) p.type = "longrope";
  const bool known = p.type == "default" || p.type == "linear" || p.type == "llama3" ||
                     p.type == "yarn" || p.type == "proportional" ||
                     (p.type == "longrope" && opt.longrope);
  if (!known) {
    throw ConfigError(config.where() + ": " + field + " type '" + p.type +
                      "' is not supported (supported: default, linear, llama3, yarn, " +
                      "proportional" + (opt.longrope ? ", longrope)" : ")"));
  }
  const auto allowed = allowed_keys(p.type, opt);
  for (const auto& [key, value] : r.json().items()) {
    if (!allowed.count(key)) {
      throw ConfigError(config.where() + ": " + field + " option '" + key +
                        "' is not supported for rope type '" + p.type + "'");
    }
  }
  p.theta = r.get_or<double>("rope_theta", p.theta);
  if (p.type == "proportional") {
    partial_rotary_factor(config, nullptr, opt);  // its own key means something else
  } else {
    p.partial_rotary_factor = partial_rotary_factor(config, &r, opt);
  }
  parse_type_fields(config, r, field, p);
  if (p.factor <= 0) throw ConfigError(config.where() + ": " + field + " factor must be > 0");
  return p;
}

Rope::Rope(const RopeParams& p, int64_t head_dim, int64_t /*max_position_embeddings*/)
    : head_dim_(head_dim), rotary_dim_(head_dim) {
  if (p.type != "proportional") {
    // transformers: dim = int(head_dim * partial_rotary_factor).
    rotary_dim_ = static_cast<int64_t>(static_cast<double>(head_dim) * p.partial_rotary_factor);
    if (rotary_dim_ <= 0 || rotary_dim_ % 2 != 0) {
      throw ConfigError("partial_rotary_factor " + std::to_string(p.partial_rotary_factor) +
                        " gives a rotary dim of " + std::to_string(rotary_dim_) + " of head_dim " +
                        std::to_string(head_dim) + ": must be even and positive");
    }
  }
  const int64_t half = rotary_dim_ / 2;
  // transformers: base ** (arange(0, dim, 2).float() / dim) in fp32, then 1 / that.
  std::vector<float> pos_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim_);
    pos_freq[i] = std::pow(static_cast<float>(p.theta), exponent);
  }
  inv_freq_.resize(half);
  for (int64_t i = 0; i < half; ++i) inv_freq_[i] = 1.0f / pos_freq[i];

  if (p.type == "longrope") init_longrope(p, pos_freq);
  if (p.type == "proportional") {
    // transformers: rope_angles = int(partial_rotary_factor * head_dim // 2).
    const auto angles = static_cast<int64_t>(
        std::floor(p.partial_rotary_factor * static_cast<double>(head_dim) / 2.0));
    for (int64_t i = angles; i < half; ++i) inv_freq_[i] = 0.0f;
    for (auto& f : inv_freq_) f /= static_cast<float>(p.factor);
  } else if (p.type == "linear") {
    for (auto& f : inv_freq_) f /= static_cast<float>(p.factor);
  } else if (p.type == "llama3") {
    const double old_len = static_cast<double>(p.original_max_position_embeddings);
    const double low_wavelen = old_len / p.low_freq_factor;
    const double high_wavelen = old_len / p.high_freq_factor;
    const float factor = static_cast<float>(p.factor);
    for (auto& f : inv_freq_) {
      const float wavelen = static_cast<float>(2 * std::numbers::pi) / f;
      float scaled = wavelen > low_wavelen ? f / factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = static_cast<float>((old_len / wavelen - p.low_freq_factor) /
                                                (p.high_freq_factor - p.low_freq_factor));
        scaled = (1 - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  } else if (p.type == "yarn") {
    init_yarn(p, pos_freq);
  }
}

// transformers' _compute_yarn_parameters over the rotary dims.
void Rope::init_yarn(const RopeParams& p, const std::vector<float>& pos_freq) {
  const int64_t half = rotary_dim_ / 2;
  auto get_mscale = [](double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
  };
  double attention = 0;
  if (p.attention_factor) {
    attention = *p.attention_factor;
  } else if (p.mscale && p.mscale_all_dim && *p.mscale != 0 && *p.mscale_all_dim != 0) {
    attention = get_mscale(p.factor, *p.mscale) / get_mscale(p.factor, *p.mscale_all_dim);
  } else {
    attention = get_mscale(p.factor, 1.0);
  }
  attention_scaling_ = static_cast<float>(attention);
  const double dim = static_cast<double>(rotary_dim_);
  const double orig = static_cast<double>(p.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(orig / (rotations * 2 * std::numbers::pi)) / (2 * std::log(p.theta));
  };
  double low = correction_dim(p.beta_fast), high = correction_dim(p.beta_slow);
  if (p.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  const float factor = static_cast<float>(p.factor);
  for (int64_t i = 0; i < half; ++i) {
    const float ramp = std::clamp(
        (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
        1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float extrapolation = 1.0f / pos_freq[i];
    const float interpolation = 1.0f / (factor * pos_freq[i]);
    inv_freq_[i] =
        interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

void Rope::init_longrope(const RopeParams& p, const std::vector<float>& pos_freq) {
  const auto half = static_cast<size_t>(rotary_dim_ / 2);
  for (const auto* f : {&p.short_factor, &p.long_factor}) {
    if (f->size() != half) {
      throw ConfigError(std::string("rope_parameters.") +
                        (f == &p.short_factor ? "short_factor" : "long_factor") + " has " +
                        std::to_string(f->size()) + " entries; rotary dim " +
                        std::to_string(rotary_dim_) + " needs " + std::to_string(half));
    }
  }
  // transformers: 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)), all fp32.
  long_inv_freq_.resize(half);
  for (size_t i = 0; i < half; ++i) {
    inv_freq_[i] = 1.0f / (static_cast<float>(p.short_factor[i]) * pos_freq[i]);
    long_inv_freq_[i] = 1.0f / (static_cast<float>(p.long_factor[i]) * pos_freq[i]);
  }
  const double orig = static_cast<double>(p.original_max_position_embeddings);
  double attention = 1.0;
  if (p.attention_factor) {
    attention = *p.attention_factor;
  } else if (p.factor > 1.0) {
    attention = std::sqrt(1.0 + std::log(p.factor) / std::log(orig));
  }
  attention_scaling_ = static_cast<float>(attention);
  long_after_ = p.original_max_position_embeddings;
}

void Rope::apply(int64_t position, float* q, int64_t q_heads, float* k, int64_t k_heads,
                 bool eager_bf16, bool long_factors) const {
  const int64_t half = rotary_dim_ / 2;
  const std::vector<float>& inv_freq = long_factors && long_after_ > 0 ? long_inv_freq_ : inv_freq_;
  const float pos = static_cast<float>(position);
  // cos/sin of the fp32 angle, scaled as transformers does (cos * attention_scaling).
  float cos_buf[512], sin_buf[512];
  for (int64_t i = 0; i < half; ++i) {
    const float angle = pos * inv_freq[i];
    cos_buf[i] = static_cast<float>(std::cos(angle)) * attention_scaling_;
    sin_buf[i] = static_cast<float>(std::sin(angle)) * attention_scaling_;
  }
  // Dims [rotary_dim, head_dim) of each head pass unrotated.
  if (eager_bf16) {
    round_bf16(cos_buf, half);
    round_bf16(sin_buf, half);
    for (int64_t h = 0; h < q_heads + k_heads; ++h) {
      float* v = h < q_heads ? q + h * head_dim_ : k + (h - q_heads) * head_dim_;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = round_bf16(round_bf16(a * cos_buf[i]) + round_bf16(-b * sin_buf[i]));
        v[i + half] = round_bf16(round_bf16(b * cos_buf[i]) + round_bf16(a * sin_buf[i]));
      }
    }
    return;
  }
  for (int64_t h = 0; h < q_heads + k_heads; ++h) {
    float* v = h < q_heads ? q + h * head_dim_ : k + (h - q_heads) * head_dim_;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      // q*cos + rotate_half(q)*sin with rotate_half(q) = (-q2, q1)
      v[i] = a * cos_buf[i] + (-b) * sin_buf[i];
      v[i + half] = b * cos_buf[i] + a * sin_buf[i];
    }
  }
}

}  // namespace hubzoo
