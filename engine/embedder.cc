#include "engine/embedder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "hub/snapshot.h"
#include "io/json.h"
#include "ops/bf16.h"

namespace hubzoo {
namespace fs = std::filesystem;
namespace {

JsonObject read_object(const fs::path& path) {
  nlohmann::json j = read_json_file(path);
  if (!j.is_object()) throw ConfigError(path.string() + ": top level must be an object");
  return JsonObject(std::move(j), path.string());
}

// "sentence_transformers.models.Pooling" -> "Pooling" (any package path).
std::string module_kind(const std::string& type) {
  const size_t dot = type.rfind('.');
  return dot == std::string::npos ? type : type.substr(dot + 1);
}

// sentence-transformers' do_lower_case: a Lowercase normalizer goes first
// unless the normalizer is one or a Sequence holds one directly.
void add_lowercase(nlohmann::json& tokenizer) {
  nlohmann::json& n = tokenizer["normalizer"];
  auto is_lowercase = [](const nlohmann::json& x) {
    return x.is_object() && x.value("type", "") == "Lowercase";
  };
  if (is_lowercase(n)) return;
  nlohmann::json seq = nlohmann::json::array({{{"type", "Lowercase"}}});
  if (n.is_object() && n.value("type", "") == "Sequence") {
    for (const auto& child : n["normalizers"]) {
      if (is_lowercase(child)) return;
      seq.push_back(child);
    }
  } else if (!n.is_null()) {
    seq.push_back(n);
  }
  n = {{"type", "Sequence"}, {"normalizers", seq}};
}

// tokenizer.json as transformers calls it from sentence-transformers:
// truncation to max_seq_length (before the post-processor adds its tokens, as
// HF truncates), no padding (batches are ragged). tokenizer_config.json
// otherwise only changes decoding, which embedding does not use.
Tokenizer load_tokenizer(const fs::path& dir, int64_t max_length, bool truncate_left,
                         bool lower_case) {
  const fs::path file = dir / "tokenizer.json";
  if (!fs::exists(file)) throw FileError(dir.string() + " has no tokenizer.json");
  nlohmann::json j = read_json_file(file);
  if (!j.is_object()) throw FormatError(file.string() + ": top level must be an object");
  j["truncation"] = {{"max_length", max_length},
                     {"strategy", "LongestFirst"},
                     {"stride", 0},
                     {"direction", truncate_left ? "Left" : "Right"}};
  j["padding"] = nullptr;
  if (lower_case) add_lowercase(j);
  return Tokenizer::from_json(j, file.string());
}

enum class Activation { kIdentity, kTanh, kReLU, kSigmoid, kGelu };

// Dense's activation_function, a torch.nn module path. A path outside torch
// falls back to Tanh, as sentence-transformers does without trust_remote_code.
Activation parse_activation(const std::string& name, const std::string& where) {
  if (!name.starts_with("torch.")) return Activation::kTanh;
  const std::string kind = module_kind(name);
  if (kind == "Identity") return Activation::kIdentity;
  if (kind == "Tanh") return Activation::kTanh;
  if (kind == "ReLU") return Activation::kReLU;
  if (kind == "Sigmoid") return Activation::kSigmoid;
  if (kind == "GELU") return Activation::kGelu;
  throw ConfigError(where + ": activation_function '" + name +
                    "' is not supported (Identity, Tanh, ReLU, Sigmoid, GELU)");
}

float activate(Activation a, float x) {
  switch (a) {
    case Activation::kIdentity:
      return x;
    case Activation::kTanh:
      return std::tanh(x);
    case Activation::kReLU:
      return x > 0.0f ? x : 0.0f;
    case Activation::kSigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case Activation::kGelu:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
  }
  return x;
}

// F.normalize(x, p=2, dim=-1): x / max(||x||, 1e-12); in eager bf16 the norm
// and the quotient are rounded, as PyTorch's bf16 ops round them.
void l2_normalize(float* x, int64_t n, const Numerics& num) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float norm = std::max(num.round_eager(static_cast<float>(std::sqrt(ss))), 1e-12f);
  for (int64_t i = 0; i < n; ++i) x[i] = num.round_eager(x[i] / norm);
}

// The pipeline's head: a Transformer, then a Pooling module.
void check_module_order(const ModuleList& list) {
  const auto& e = list.entries;
  if (e[0].kind != "Transformer") {
    throw ConfigError(list.file.string() + ": the first module must be a Transformer, not '" +
                      e[0].kind + "'");
  }
  if (e.size() < 2 || e[1].kind != "Pooling") {
    throw ConfigError(list.file.string() + ": a Pooling module must follow the Transformer");
  }
}

PoolingConfig read_pooling_config(const fs::path& file) {
  if (!fs::exists(file)) {
    throw FileError(file.string() + ": missing (modules.json lists a Pooling module there)");
  }
  return PoolingConfig::parse(read_object(file));
}

// What the Transformer module's folder says about tokenizing:
// sentence_bert_config.json and tokenizer_config.json.
struct TokenizingSettings {
  std::optional<int64_t> max_seq_length;  // sentence_bert_config.json
  int64_t model_max_length = INT64_MAX;   // tokenizer_config.json (none: no limit)
  bool do_lower_case = false;
  bool truncate_left = false;
};

TokenizingSettings read_tokenizing_settings(const fs::path& dir) {
  TokenizingSettings s;
  if (fs::exists(dir / "sentence_bert_config.json")) {
    const JsonObject sb = read_object(dir / "sentence_bert_config.json");
    s.max_seq_length = sb.maybe<int64_t>("max_seq_length");
    s.do_lower_case = sb.get_or<bool>("do_lower_case", false);
    const std::string task = sb.get_or<std::string>("transformer_task", "feature-extraction");
    if (task != "feature-extraction") {
      throw ConfigError(sb.where() + ": transformer_task '" + task + "' is not supported");
    }
  }
  if (fs::exists(dir / "tokenizer_config.json")) {
    const JsonObject tc = read_object(dir / "tokenizer_config.json");
    // transformers stores "no limit" as a huge float (1e30); anything past int64 is no limit.
    if (tc.has("model_max_length") && tc.json()["model_max_length"].is_number_integer()) {
      s.model_max_length = tc.get<int64_t>("model_max_length");
    }
    s.truncate_left = tc.get_or<std::string>("truncation_side", "right") == "left";
  }
  return s;
}

// config_sentence_transformers.json: prompts (name -> text; null is "") and
// default_prompt_name, which must be one of them.
void read_prompts(const fs::path& file, EmbedderInfo& info) {
  if (!fs::exists(file)) return;
  const JsonObject c = read_object(file);
  if (const auto prompts = c.object("prompts")) {
    for (const auto& [name, value] : prompts->json().items()) {
      if (!value.is_string() && !value.is_null()) {
        throw ConfigError(c.where() + ": prompt '" + name + "' must be a string");
      }
      info.prompts[name] = value.is_string() ? value.get<std::string>() : "";
    }
  }
  info.default_prompt_name = c.maybe<std::string>("default_prompt_name");
  if (info.default_prompt_name && !info.prompts.count(*info.default_prompt_name)) {
    throw ConfigError(c.where() + ": default_prompt_name '" + *info.default_prompt_name +
                      "' is not one of the prompts");
  }
}

}  // namespace

// sentence-transformers' Dense: activation(linear(x)) (+ x or residual(x)).
struct Embedder::Dense {
  std::shared_ptr<const Checkpoint> checkpoint;  // keeps zero-copy weights mapped
  Linear linear;
  std::optional<Linear> residual;  // use_residual with in != out
  bool use_residual = false;
  Activation activation = Activation::kTanh;
};

std::shared_ptr<const Embedder::Dense> Embedder::load_dense(const fs::path& dir,
                                                            const Numerics& numerics,
                                                            int64_t in_dimension) {
  const JsonObject c = read_object(dir / "config.json");
  const int64_t in = c.get<int64_t>("in_features"), out = c.get<int64_t>("out_features");
  if (in != in_dimension) {
    throw ConfigError(c.where() + ": in_features " + std::to_string(in) +
                      " differs from the incoming dimension " + std::to_string(in_dimension));
  }
  if (out <= 0) throw ConfigError(c.where() + ": out_features must be positive");
  for (const char* key : {"module_input_name", "module_output_name"}) {
    if (c.get_or<std::string>(key, "sentence_embedding") != "sentence_embedding") {
      throw ConfigError(c.where() + ": " + key +
                        " other than 'sentence_embedding' is not supported");
    }
  }
  auto d = std::make_shared<Embedder::Dense>();
  d->activation = parse_activation(
      c.get_or<std::string>("activation_function", "torch.nn.modules.activation.Tanh"), c.where());
  d->use_residual = c.get_or<bool>("use_residual", false);
  if (!fs::exists(dir / "model.safetensors")) {
    if (fs::exists(dir / "pytorch_model.bin")) {
      throw FileError((dir / "pytorch_model.bin").string() +
                      ": Dense weights stored as a PyTorch pickle; hubzoo reads only safetensors "
                      "(re-save the model with safe_serialization=True)");
    }
    throw FileError(dir.string() + ": no model.safetensors with the Dense weights");
  }
  auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(dir));
  d->checkpoint = ckpt;
  WeightLoader w(ckpt, numerics);
  d->linear = Linear::load(w, "linear", in, out, c.get_or<bool>("bias", true));
  if (d->use_residual && in != out) d->residual = Linear::load(w, "residual", in, out, false);
  w.finish();
  return d;
}

ModuleList ModuleList::read(const fs::path& snapshot) {
  ModuleList list;
  list.file = snapshot / "modules.json";
  if (!fs::exists(list.file)) {
    list.is_default = true;
    list.entries = {{"Transformer", snapshot}, {"Pooling", fs::path()}};
    return list;
  }
  const nlohmann::json j = read_json_file(list.file);
  if (!j.is_array() || j.empty()) {
    throw ConfigError(list.file.string() + ": must be a non-empty list of modules");
  }
  for (const auto& m : j) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) {
      throw ConfigError(list.file.string() + ": every module needs a 'type' string");
    }
    const std::string path = m.value("path", "");
    list.entries.push_back({module_kind(m["type"].get<std::string>()), snapshot / path});
  }
  return list;
}

std::unique_ptr<Embedder> Embedder::load(const std::string& model, const EmbedderOptions& options) {
  std::unique_ptr<Embedder> e(new Embedder());
  e->numerics_ = options.numerics;
  e->load_modules(resolve_snapshot(model), options);
  return e;
}

// Files are read in the order of their cost: modules.json and the pooling
// config before the (slow) encoder weights.
void Embedder::load_modules(const fs::path& snapshot, const EmbedderOptions& options) {
  info_.snapshot = snapshot;
  const ModuleList modules = ModuleList::read(snapshot);
  info_.default_modules = modules.is_default;
  check_module_order(modules);
  if (!modules.is_default) {
    info_.pooling = read_pooling_config(modules.entries[1].dir / "config.json");
  }
  load_transformer(modules.entries[0].dir, options);
  read_prompts(snapshot / "config_sentence_transformers.json", info_);
  load_tail(modules, options.numerics);
  pool_ = ThreadPool::shared(1);  // Dense layers are [batch, dim]: small (no threads)
}

void Embedder::load_transformer(const fs::path& dir, const EmbedderOptions& options) {
  encoder_ = load_encoder(dir.string(), {options.num_threads, options.numerics});
  const TokenizingSettings s = read_tokenizing_settings(dir);
  info_.do_lower_case = s.do_lower_case;
  info_.truncate_left = s.truncate_left;
  // sentence-transformers: max_seq_length, else the tokenizer's limit capped at
  // max_position_embeddings.
  info_.max_seq_length = s.max_seq_length.value_or(
      std::min(s.model_max_length, encoder_->info().max_position_embeddings));
  if (info_.max_seq_length <= 0) {
    throw ConfigError(dir.string() + ": max_seq_length must be positive");
  }
  tokenizer_ = std::make_unique<Tokenizer>(
      load_tokenizer(dir, info_.max_seq_length, info_.truncate_left, info_.do_lower_case));
}

void Embedder::load_tail(const ModuleList& modules, const Numerics& numerics) {
  const int64_t hidden = encoder_->info().hidden_size;
  info_.modules.push_back("Transformer");
  if (modules.is_default) {
    info_.pooling.embedding_dimension = hidden;
    info_.pooling.modes = {PoolingMode::kMean};
  } else if (info_.pooling.embedding_dimension != hidden) {
    throw ConfigError((modules.entries[1].dir / "config.json").string() + ": embedding dimension " +
                      std::to_string(info_.pooling.embedding_dimension) +
                      " differs from the model's hidden_size " + std::to_string(hidden));
  }
  info_.modules.push_back("Pooling");
  int64_t dim = static_cast<int64_t>(info_.pooling.modes.size()) * hidden;
  for (size_t i = 2; i < modules.entries.size(); ++i) {
    const std::string& kind = modules.entries[i].kind;
    if (kind == "Dense") {
      tail_.push_back(load_dense(modules.entries[i].dir, numerics, dim));
      dim = tail_.back()->linear.out_features();
    } else if (kind == "Normalize") {
      tail_.push_back(nullptr);
    } else {
      throw ConfigError(modules.file.string() + ": module type '" + kind +
                        "' is not supported (Transformer, Pooling, Dense, Normalize)");
    }
    info_.modules.push_back(kind);
  }
  info_.dimension = dim;
}

std::optional<std::string> Embedder::resolve_prompt(const EmbedOptions& o) const {
  if (o.prompt) return o.prompt;
  if (o.prompt_name) {
    auto it = info_.prompts.find(*o.prompt_name);
    if (it == info_.prompts.end()) {
      std::string known;
      for (const auto& [name, _] : info_.prompts) known += (known.empty() ? "" : ", ") + name;
      throw InvalidArgument("prompt name '" + *o.prompt_name + "' is not configured (prompts: " +
                            (known.empty() ? "none" : known) + ")");
    }
    return it->second;
  }
  if (info_.default_prompt_name) return info_.prompts.at(*info_.default_prompt_name);
  return std::nullopt;
}

TokenizedText Embedder::tokenize(const std::string& text) const {
  Encoding e = tokenizer_->encode(text);
  TokenizedText t;
  t.last_is_special = !e.special_tokens_mask.empty() && e.special_tokens_mask.back() != 0;
  t.ids = std::move(e.ids);
  t.type_ids = std::move(e.type_ids);
  return t;
}

int64_t Embedder::prompt_length(const std::string& prompt) const {
  const TokenizedText t = tokenize(prompt);
  return static_cast<int64_t>(t.ids.size()) - (t.last_is_special ? 1 : 0);
}

void Embedder::finish_rows(std::vector<float>& rows, int64_t n, bool normalize_modules,
                           bool normalize_after) const {
  int64_t dim = static_cast<int64_t>(rows.size()) / std::max<int64_t>(n, 1);
  for (const auto& dense : tail_) {
    if (!dense) {
      if (normalize_modules) {
        for (int64_t r = 0; r < n; ++r) l2_normalize(&rows[r * dim], dim, numerics_);
      }
      continue;
    }
    const int64_t out = dense->linear.out_features();
    std::vector<float> y(n * out);
    dense->linear.forward(rows.data(), n, y.data(), *pool_);
    numerics_.round_eager(y.data(), n * out);
    for (float& v : y) v = numerics_.round_eager(activate(dense->activation, v));
    if (dense->use_residual) {
      std::vector<float> res = rows;
      if (dense->residual) {
        res.assign(n * out, 0.0f);
        dense->residual->forward(rows.data(), n, res.data(), *pool_);
        numerics_.round_eager(res.data(), n * out);
      }
      for (int64_t i = 0; i < n * out; ++i) y[i] = numerics_.round_eager(y[i] + res[i]);
    }
    rows = std::move(y);
    dim = out;
  }
  if (normalize_after) {
    for (int64_t r = 0; r < n; ++r) l2_normalize(&rows[r * dim], dim, numerics_);
  }
}

std::vector<float> Embedder::encode(const std::vector<std::string>& texts,
                                    const EmbedOptions& options) {
  if (options.batch_size <= 0) {
    throw InvalidArgument("batch_size must be positive, got " + std::to_string(options.batch_size));
  }
  const int64_t n = static_cast<int64_t>(texts.size());
  const std::optional<std::string> prompt = resolve_prompt(options);
  const bool with_prompt = prompt && !prompt->empty();
  // sentence-transformers leaves the prompt's tokens out of pooling only when
  // include_prompt is false; its length is measured on the prompt alone.
  const int64_t skip = with_prompt && !info_.pooling.include_prompt ? prompt_length(*prompt) : 0;
  std::vector<TokenizedText> tokens(n);
  for (int64_t i = 0; i < n; ++i) {
    tokens[i] = tokenize(with_prompt ? *prompt + texts[i] : texts[i]);
    if (tokens[i].ids.empty()) {
      throw InvalidArgument("text " + std::to_string(i) +
                            " encodes to no tokens (the tokenizer adds no special tokens)");
    }
  }
  // Longest first: similar lengths share a forward pass (results do not depend on it).
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return tokens[a].ids.size() > tokens[b].ids.size();
  });

  const EncoderInfo& enc = encoder_->info();
  const int64_t hidden = enc.hidden_size;
  const int64_t pooled_dim = static_cast<int64_t>(info_.pooling.modes.size()) * hidden;
  const bool normalize_modules = options.normalize.value_or(true);
  const bool normalize_after = options.normalize.value_or(false);
  std::vector<float> result(n * info_.dimension);
  for (int64_t begin = 0; begin < n; begin += options.batch_size) {
    const int64_t end = std::min(n, begin + options.batch_size), rows = end - begin;
    EncoderBatch batch;
    for (int64_t r = begin; r < end; ++r) {
      const TokenizedText& t = tokens[order[r]];
      batch.add(t.ids, enc.uses_token_type_ids ? t.type_ids : std::vector<int64_t>{});
    }
    EncoderResult out;
    encoder_->forward(batch, {}, out);
    std::vector<float> pooled(rows * pooled_dim);
    int64_t offset = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t len = batch.lengths[r];
      pool_sequence(&out.hidden[offset * hidden], len, hidden, skip, info_.pooling.modes,
                    numerics_.eager_bf16(), &pooled[r * pooled_dim]);
      offset += len;
    }
    finish_rows(pooled, rows, normalize_modules, normalize_after);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(&pooled[r * info_.dimension], info_.dimension,
                  &result[order[begin + r] * info_.dimension]);
    }
  }
  return result;
}

}  // namespace hubzoo
