// sentence-transformers' Pooling module over one ragged sequence.
#include <cmath>
#include <limits>

#include "base/error.h"
#include "engine/embedder.h"
#include "ops/bf16.h"

namespace hubzoo {
namespace {

struct ModeName {
  PoolingMode mode;
  const char* name;
  const char* legacy_key;  // pooling_mode_* boolean of older configs
};

// In the order the legacy booleans concatenate (sentence-transformers' forward()).
constexpr ModeName kModes[] = {
    {PoolingMode::kCls, "cls", "pooling_mode_cls_token"},
    {PoolingMode::kMax, "max", "pooling_mode_max_tokens"},
    {PoolingMode::kMean, "mean", "pooling_mode_mean_tokens"},
    {PoolingMode::kMeanSqrtLen, "mean_sqrt_len_tokens", "pooling_mode_mean_sqrt_len_tokens"},
    {PoolingMode::kWeightedMean, "weightedmean", "pooling_mode_weightedmean_tokens"},
    {PoolingMode::kLastToken, "lasttoken", "pooling_mode_lasttoken"},
};

PoolingMode mode_from_name(const std::string& name, const std::string& where) {
  std::string valid;
  for (const auto& m : kModes) {
    if (name == m.name) return m.mode;
    valid += (valid.empty() ? "" : ", ") + std::string(m.name);
  }
  throw ConfigError(where + ": unknown pooling mode '" + name + "' (valid: " + valid + ")");
}

}  // namespace

const char* pooling_mode_name(PoolingMode mode) {
  for (const auto& m : kModes) {
    if (m.mode == mode) return m.name;
  }
  return "?";
}

PoolingConfig PoolingConfig::parse(const JsonObject& c) {
  PoolingConfig p;
  const char* dim_key =
      c.has("embedding_dimension") ? "embedding_dimension" : "word_embedding_dimension";
  p.embedding_dimension = c.get<int64_t>(dim_key);
  if (p.embedding_dimension <= 0) {
    throw ConfigError(c.where() + ": field '" + dim_key + "' must be positive");
  }
  p.include_prompt = c.get_or<bool>("include_prompt", true);
  if (c.has("pooling_mode")) {
    const nlohmann::json& j = c.json()["pooling_mode"];
    if (j.is_string()) {
      p.modes.push_back(mode_from_name(j.get<std::string>(), c.where()));
    } else if (j.is_array() && !j.empty()) {
      for (const auto& name : c.get<std::vector<std::string>>("pooling_mode")) {
        p.modes.push_back(mode_from_name(name, c.where()));
      }
    } else {
      throw ConfigError(c.where() + ": field 'pooling_mode' must be a mode name or a list of them");
    }
    return p;
  }
  for (const auto& m : kModes) {
    if (c.get_or<bool>(m.legacy_key, false)) p.modes.push_back(m.mode);
  }
  if (p.modes.empty()) p.modes.push_back(PoolingMode::kMean);  // sentence-transformers' default
  return p;
}

void pool_sequence(const float* h, int64_t len, int64_t hidden, int64_t skip,
                   const std::vector<PoolingMode>& modes, bool bf16_output, float* out) {
  const int64_t first = std::min(std::max<int64_t>(skip, 0), len);
  const int64_t count = len - first;  // tokens pooled
  for (const PoolingMode mode : modes) {
    switch (mode) {
      case PoolingMode::kCls:  // the first pooled token (token 0 if none is)
        std::copy_n(h + (count > 0 ? first : 0) * hidden, hidden, out);
        break;
      case PoolingMode::kLastToken:  // the last token; zeros if it is masked
        if (count > 0) {
          std::copy_n(h + (len - 1) * hidden, hidden, out);
        } else {
          std::fill_n(out, hidden, 0.0f);
        }
        break;
      case PoolingMode::kMax:
        std::fill_n(out, hidden, -std::numeric_limits<float>::infinity());
        for (int64_t t = first; t < len; ++t) {
          for (int64_t i = 0; i < hidden; ++i) out[i] = std::max(out[i], h[t * hidden + i]);
        }
        break;
      case PoolingMode::kMean:
      case PoolingMode::kMeanSqrtLen:
      case PoolingMode::kWeightedMean: {
        // Sums in double (a fixed order), divided by the count (clamped at
        // 1e-9 as sentence-transformers clamps it).
        const bool weighted = mode == PoolingMode::kWeightedMean;
        std::vector<double> sum(hidden, 0.0);
        double total = 0.0;
        for (int64_t t = first; t < len; ++t) {
          const double w = weighted ? static_cast<double>(t + 1) : 1.0;
          for (int64_t i = 0; i < hidden; ++i) sum[i] += w * h[t * hidden + i];
          total += w;
        }
        const float clamped = std::max(static_cast<float>(total), 1e-9f);
        const float denom = mode == PoolingMode::kMeanSqrtLen ? std::sqrt(clamped) : clamped;
        for (int64_t i = 0; i < hidden; ++i) {
          const float v = static_cast<float>(sum[i]) / denom;
          out[i] = bf16_output ? round_bf16(v) : v;
        }
        break;
      }
    }
    out += hidden;
  }
}

}  // namespace hubzoo
