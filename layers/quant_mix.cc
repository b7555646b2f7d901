#include "layers/quant_mix.h"

#include <algorithm>
#include <cstdlib>

namespace hubzoo {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// N of the first "layers.N." in name; -1 if none.
int64_t layer_index(const std::string& name) {
  const size_t at = name.find("layers.");
  if (at == std::string::npos) return -1;
  size_t i = at + 7, end = i;
  while (end < name.size() && end - i < 9 && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == i || end >= name.size() || name[end] != '.') return -1;
  return std::strtoll(name.c_str() + i, nullptr, 10);
}

// llama-quantize's use_more_bits: the first and last eighth of the layers and
// every third layer between.
bool use_more_bits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// llama-quantize's tensor_type_fallback for rows of k columns.
std::optional<QuantType> fallback(QuantType t, int64_t k) {
  if (k % quant_traits(t).block_elems == 0) return t;
  switch (t) {
    case QuantType::Q4_K:
      t = QuantType::Q5_0;
      break;
    case QuantType::Q5_K:
      t = QuantType::Q5_1;
      break;
    case QuantType::Q6_K:
      t = QuantType::Q8_0;
      break;
    default:
      return std::nullopt;
  }
  if (k % quant_traits(t).block_elems == 0) return t;
  return std::nullopt;
}

}  // namespace

QuantMixModel quant_mix_model(const std::vector<std::string>& names) {
  QuantMixModel m;
  m.tied = true;
  for (const std::string& n : names) {
    m.n_layers = std::max(m.n_layers, layer_index(n) + 1);
    if (ends_with(n, "lm_head.weight")) m.tied = false;
  }
  return m;
}

std::optional<QuantType> quant_mix_type(const Numerics& numerics, const QuantMixModel& model,
                                        const QuantMixTensor& t) {
  if (!numerics.quantize) return std::nullopt;
  const QuantType base = *numerics.quantize;
  if (numerics.quant_mix == QuantMix::kNone) {
    if (t.k % quant_traits(base).block_elems != 0) return std::nullopt;
    return base;
  }
  const bool q4 = numerics.quant_mix == QuantMix::kQ4_K_M;
  const bool output = ends_with(t.name, "lm_head.weight") ||
                      (model.tied && ends_with(t.name, "embed_tokens.weight"));
  const int64_t layer = layer_index(t.name);
  const bool more_bits = layer >= 0 && use_more_bits(layer, model.n_layers);
  QuantType type = base;
  if (output) {
    type = t.k % 256 != 0 ? QuantType::Q8_0 : QuantType::Q6_K;
  } else if (t.name.find(".qkv_proj.") != std::string::npos) {
    type = q4 ? QuantType::Q5_K : QuantType::Q6_K;
  } else if ((t.name.find(".v_proj.") != std::string::npos ||
              t.name.find("down_proj") != std::string::npos) &&
             more_bits) {
    type = QuantType::Q6_K;
  }
  return fallback(type, t.k);
}

}  // namespace hubzoo
