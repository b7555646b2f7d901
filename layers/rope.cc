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
const std::set<std::string>& allowed_keys(const std::string& type) {
  static const std::set<std::string> base = {"rope_type", "type", "rope_theta"};
  static const std::map<std::string, std::set<std::string>> extra = {
      {"default", {}},
      {"linear", {"factor"}},
      {"llama3",
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}},
      {"yarn",
       {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
        "original_max_position_embeddings", "truncate"}},
      {"proportional", {"factor", "partial_rotary_factor"}},
  };
  static std::map<std::string, std::set<std::string>> merged;
  auto& m = merged[type];
  if (m.empty()) {
    m = base;
    m.insert(extra.at(type).begin(), extra.at(type).end());
  }
  return m;
}

}  // namespace

RopeParams parse_rope_params(const JsonObject& config) {
  RopeParams p;
  p.theta = config.get_or<double>("rope_theta", 10000.0);
  if (config.has("partial_rotary_factor") && config.get<double>("partial_rotary_factor") != 1.0) {
    throw ConfigError(config.where() + ": partial_rotary_factor != 1 is not supported");
  }
  std::optional<JsonObject> rope = config.object("rope_parameters");
  std::string field = "rope_parameters";
  if (!rope) {
    rope = config.object("rope_scaling");
    field = "rope_scaling";
  }
  if (!rope) return p;
  const JsonObject& r = *rope;
  for (const auto& [key, value] : r.json().items()) {
    if (value.is_object()) {
      throw ConfigError(config.where() + ": per-layer-type " + field + " ('" + key +
                        "') is not supported for this architecture");
    }
  }
  p.type = r.get_or<std::string>("rope_type", r.get_or<std::string>("type", "default"));
  if (p.type != "default" && p.type != "linear" && p.type != "llama3" && p.type != "yarn" &&
      p.type != "proportional") {
    throw ConfigError(
        config.where() + ": " + field + " type '" + p.type +
        "' is not supported (supported: default, linear, llama3, yarn, proportional)");
  }
  const auto& allowed = allowed_keys(p.type);
  for (const auto& [key, value] : r.json().items()) {
    if (!allowed.count(key)) {
      throw ConfigError(config.where() + ": " + field + " option '" + key +
                        "' is not supported for rope type '" + p.type + "'");
    }
  }
  p.theta = r.get_or<double>("rope_theta", p.theta);
  const int64_t max_pos = config.get_or<int64_t>("max_position_embeddings", 2048);
  if (p.type == "linear" || p.type == "llama3") p.factor = r.get<double>("factor");
  if (p.type == "llama3") {
    p.low_freq_factor = r.get<double>("low_freq_factor");
    p.high_freq_factor = r.get<double>("high_freq_factor");
  }
  if (p.type == "llama3" || p.type == "yarn") {
    // transformers prefers a top-level original_max_position_embeddings (Phi3 style).
    p.original_max_position_embeddings =
        config.get_or<int64_t>("original_max_position_embeddings",
                               r.get_or<int64_t>("original_max_position_embeddings", max_pos));
  }
  if (p.type == "proportional") {
    p.factor = r.get_or<double>("factor", 1.0);
    p.partial_rotary_factor = r.get_or<double>("partial_rotary_factor", 1.0);
    if (!(p.partial_rotary_factor >= 0 && p.partial_rotary_factor <= 1)) {
      throw ConfigError(config.where() + ": " + field + " partial_rotary_factor must be in [0, 1]");
    }
  }
  if (p.type == "yarn") {
    auto factor = r.maybe<double>("factor");
    p.factor = factor ? *factor
                      : static_cast<double>(max_pos) /
                            static_cast<double>(p.original_max_position_embeddings);
    p.attention_factor = r.maybe<double>("attention_factor");
    p.mscale = r.maybe<double>("mscale");
    p.mscale_all_dim = r.maybe<double>("mscale_all_dim");
    // transformers: `get("beta_fast") or 32`, so 0 also means the default.
    auto beta_fast = r.maybe<double>("beta_fast");
    auto beta_slow = r.maybe<double>("beta_slow");
    if (beta_fast && *beta_fast != 0) p.beta_fast = *beta_fast;
    if (beta_slow && *beta_slow != 0) p.beta_slow = *beta_slow;
    p.truncate = r.get_or<bool>("truncate", true);
  }
  if (p.factor <= 0) throw ConfigError(config.where() + ": " + field + " factor must be > 0");
  return p;
}

Rope::Rope(const RopeParams& p, int64_t head_dim, int64_t /*max_position_embeddings*/)
    : head_dim_(head_dim) {
  const int64_t half = head_dim / 2;
  // transformers: base ** (arange(0, dim, 2).float() / dim) in fp32, then 1 / that.
  std::vector<float> pos_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    pos_freq[i] = std::pow(static_cast<float>(p.theta), exponent);
  }
  inv_freq_.resize(half);
  for (int64_t i = 0; i < half; ++i) inv_freq_[i] = 1.0f / pos_freq[i];

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
    const double dim = static_cast<double>(head_dim);
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
}

void Rope::apply(int64_t position, float* q, int64_t q_heads, float* k, int64_t k_heads,
                 bool eager_bf16) const {
  const int64_t half = head_dim_ / 2;
  const float pos = static_cast<float>(position);
  // cos/sin of the fp32 angle, scaled as transformers does (cos * attention_scaling).
  float cos_buf[512], sin_buf[512];
  for (int64_t i = 0; i < half; ++i) {
    const float angle = pos * inv_freq_[i];
    cos_buf[i] = static_cast<float>(std::cos(angle)) * attention_scaling_;
    sin_buf[i] = static_cast<float>(std::sin(angle)) * attention_scaling_;
  }
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
