// Reranker: cross-encoders (sentence-transformers' CrossEncoder) and decoder
// rerankers of the Qwen3-Reranker kind; see engine/reranker.h.
#include "engine/reranker.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "hub/snapshot.h"
#include "io/json.h"
#include "io/safetensors.h"

namespace hubzoo {
namespace fs = std::filesystem;
namespace {

// The Qwen3-Reranker model card's prompt around "<Instruct>: ...".
constexpr const char* kDecoderPrefix =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or "
    "\"no\".<|im_end|>\n<|im_start|>user\n";
constexpr const char* kDecoderSuffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
constexpr const char* kDefaultInstruction =
    "Given a web search query, retrieve relevant passages that answer the query";
constexpr int64_t kDecoderMaxLength = 8192;  // the model card's max_length
constexpr int64_t kMaxLabels = 4096;         // bound on the classifier's rows

nlohmann::json read_json_if(const fs::path& p) {
  return fs::exists(p) ? read_json_file(p) : nlohmann::json::object();
}

// The activation CrossEncoder applies: its saved activation_fn (torch path),
// else Sigmoid for one label and Identity for more.
std::string crossencoder_activation(const fs::path& dir, const nlohmann::json& config,
                                    int64_t num_labels) {
  std::string path;
  const nlohmann::json st = read_json_if(dir / "config_sentence_transformers.json");
  if (st.is_object() && st.contains("activation_fn") && st["activation_fn"].is_string()) {
    path = st["activation_fn"].get<std::string>();
  } else if (config.contains("sentence_transformers") &&
             config["sentence_transformers"].is_object() &&
             config["sentence_transformers"].contains("activation_fn") &&
             config["sentence_transformers"]["activation_fn"].is_string()) {
    path = config["sentence_transformers"]["activation_fn"].get<std::string>();
  } else if (config.contains("sbert_ce_default_activation_function") &&
             config["sbert_ce_default_activation_function"].is_string()) {
    path = config["sbert_ce_default_activation_function"].get<std::string>();
  }
  if (path.empty()) return num_labels == 1 ? "sigmoid" : "identity";
  const std::string name = path.substr(path.rfind('.') + 1);
  if (name == "Sigmoid") return "sigmoid";
  if (name == "Identity") return "identity";
  if (name == "Tanh") return "tanh";
  throw ConfigError(dir.string() + ": activation_fn '" + path +
                    "' is not supported (Sigmoid, Identity, Tanh)");
}

// The model card's format_instruction(instruction, query, doc).
std::string decoder_body(const RerankOptions& o, const std::string& query,
                         const std::string& document) {
  return "<Instruct>: " + o.instruction.value_or(kDefaultInstruction) + "\n<Query>: " + query +
         "\n<Document>: " + document;
}

float activate(const std::string& activation, float x) {
  if (activation == "sigmoid") return 1.0f / (1.0f + std::exp(-x));
  if (activation == "tanh") return std::tanh(x);
  return x;
}

// y[n] = b[n] + sum_k w[n, k] x[k]  (torch's Linear), accumulated in double.
void linear(const FloatWeights& w, const FloatWeights& b, const float* x, int64_t n, int64_t k,
            float* y) {
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    const float* row = w.data() + i * k;
    for (int64_t j = 0; j < k; ++j) s += static_cast<double>(row[j]) * x[j];
    y[i] = static_cast<float>(s + b.data()[i]);
  }
}

}  // namespace

// The classification head on the first token's hidden state h [H]:
// logits = out(tanh(dense(h))) (BERT: pooler.dense, classifier).
struct Reranker::Head {
  std::shared_ptr<Checkpoint> checkpoint;  // keeps zero-copy weights mapped
  FloatWeights dense_w, dense_b, out_w, out_b;
  int64_t hidden = 0, labels = 0;

  void forward(const float* h, float* logits) const {
    std::vector<float> pooled(hidden);
    linear(dense_w, dense_b, h, hidden, hidden, pooled.data());
    for (float& v : pooled) v = std::tanh(v);
    linear(out_w, out_b, pooled.data(), labels, hidden, logits);
  }
};

Reranker::~Reranker() = default;

std::unique_ptr<Reranker> Reranker::load(const std::string& model, const RerankerOptions& options) {
  const fs::path dir = resolve_snapshot(model);
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) throw FileError(dir.string() + ": no config.json");
  const JsonObject config(read_json_file(config_path), config_path.string());
  std::unique_ptr<Reranker> r(new Reranker());
  r->info_.snapshot = dir;
  const auto archs = config.maybe<std::vector<std::string>>("architectures");
  r->info_.architecture = archs && !archs->empty() ? (*archs)[0] : "";
  const std::string& arch = r->info_.architecture;
  if (arch.ends_with("ForCausalLM")) {
    r->load_decoder(dir, options);
  } else if (arch.ends_with("ForSequenceClassification")) {
    r->load_cross_encoder(dir, options);
  } else {
    throw ConfigError(config.where() + ": architecture '" + arch +
                      "' is not a reranker (a *ForSequenceClassification cross-encoder or a "
                      "*ForCausalLM yes/no reranker)");
  }
  if (options.max_length < 0) throw InvalidArgument("max_length must be >= 0");
  return r;
}

void Reranker::load_cross_encoder(const fs::path& dir, const RerankerOptions& options) {
  encoder_ = load_encoder(dir.string(), {options.num_threads, options.numerics});
  tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_pretrained(dir));
  const nlohmann::json config = read_json_file(dir / "config.json");
  const EncoderInfo& ei = encoder_->info();
  // CrossEncoder: the tokenizer's model_max_length capped at max_position_embeddings.
  int64_t limit = ei.max_tokens;
  const nlohmann::json tc = read_json_if(dir / "tokenizer_config.json");
  if (tc.is_object() && tc.contains("model_max_length") && tc["model_max_length"].is_number()) {
    const double m = tc["model_max_length"].get<double>();
    if (m >= 1 && m < static_cast<double>(limit)) limit = static_cast<int64_t>(m);
  }
  info_.max_length = options.max_length > 0 ? std::min(options.max_length, ei.max_tokens) : limit;

  auto head = std::make_unique<Head>();
  head->checkpoint = std::make_shared<Checkpoint>(Checkpoint::open(dir));
  WeightLoader w(head->checkpoint, Numerics{});
  const int64_t h = ei.hidden_size;
  const bool roberta = w.contains("classifier.dense.weight");
  const std::string out_name = roberta ? "classifier.out_proj.weight" : "classifier.weight";
  if (!w.contains(out_name)) {
    throw TensorMappingError(dir.string() + ": no '" + out_name + "' (the classification head)");
  }
  const Shape shape = head->checkpoint->info(out_name).shape;
  if (shape.size() != 2 || shape[0] < 1 || shape[0] > kMaxLabels) {
    throw TensorMappingError(dir.string() + ": '" + out_name + "' is not [num_labels, hidden]");
  }
  head->hidden = h;
  head->labels = shape[0];
  const std::string dense = roberta ? "classifier.dense" : "bert.pooler.dense";
  head->dense_w = w.take(dense + ".weight", {h, h});
  head->dense_b = w.take(dense + ".bias", {h});
  const std::string out = roberta ? "classifier.out_proj" : "classifier";
  head->out_w = w.take(out + ".weight", {head->labels, h});
  head->out_b = w.take(out + ".bias", {head->labels});
  head_ = std::move(head);
  info_.num_labels = head_->labels;
  info_.activation = crossencoder_activation(dir, config, info_.num_labels);
}

void Reranker::load_decoder(const fs::path& dir, const RerankerOptions& options) {
  lm_ = load_causal_lm(dir.string(), {options.num_threads, options.numerics});
  tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_pretrained(dir));
  auto id = [&](const char* token) {
    const auto i = tokenizer_->token_to_id(token);
    if (!i) throw ConfigError(dir.string() + ": the tokenizer has no token '" + token + "'");
    return *i;
  };
  info_.decoder = true;
  info_.yes_id = id("yes");
  info_.no_id = id("no");
  info_.num_labels = 1;
  info_.activation = "softmax[no,yes]";
  prefix_ids_ = tokenizer_->encode(kDecoderPrefix, false).ids;
  suffix_ids_ = tokenizer_->encode(kDecoderSuffix, false).ids;
  const int64_t limit = std::min(kDecoderMaxLength, lm_->info().max_position_embeddings);
  info_.max_length = options.max_length > 0 ? std::min(options.max_length, limit) : limit;
  const int64_t around = static_cast<int64_t>(prefix_ids_.size() + suffix_ids_.size());
  if (info_.max_length <= around) {
    throw InvalidArgument("max_length " + std::to_string(info_.max_length) +
                          " leaves no room inside the reranker prompt of " +
                          std::to_string(around) + " tokens");
  }
}

PairTokens Reranker::tokenize(const std::string& query, const std::string& document,
                              const RerankOptions& options) const {
  PairTokens p;
  if (!info_.decoder) {
    const Encoding e =
        tokenizer_->encode_pair(query, document, true, static_cast<size_t>(info_.max_length));
    p.ids = e.ids;
    if (encoder_->info().uses_token_type_ids) p.type_ids = e.type_ids;
    return p;
  }
  // The model card: tokenizer(format_instruction(...), truncation, max_length
  // = max_length - prefix - suffix), between the prefix and suffix tokens.
  const std::string body = decoder_body(options, query, document);
  std::vector<int64_t> ids = tokenizer_->encode(body, true).ids;
  const size_t room =
      static_cast<size_t>(info_.max_length) - prefix_ids_.size() - suffix_ids_.size();
  if (ids.size() > room) ids.resize(room);
  p.ids = prefix_ids_;
  p.ids.insert(p.ids.end(), ids.begin(), ids.end());
  p.ids.insert(p.ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return p;
}

int64_t Reranker::full_length(const std::string& query, const std::string& document,
                              const RerankOptions& options) const {
  if (!info_.decoder) return static_cast<int64_t>(tokenizer_->encode_pair(query, document).size());
  const std::string body = decoder_body(options, query, document);
  return static_cast<int64_t>(tokenizer_->encode(body, true).size() + prefix_ids_.size() +
                              suffix_ids_.size());
}

void Reranker::run_chunk(const std::vector<PairTokens>& pairs, bool raw,
                         std::vector<float>& out) const {
  if (!info_.decoder) {
    EncoderBatch batch;
    for (const PairTokens& p : pairs) batch.add(p.ids, p.type_ids);
    EncoderResult r;
    encoder_->forward(batch, {}, r);
    const int64_t h = encoder_->info().hidden_size, labels = info_.num_labels;
    int64_t row = 0;
    std::vector<float> logits(labels);
    for (const int64_t len : batch.lengths) {
      head_->forward(r.hidden.data() + row * h, logits.data());
      for (float v : logits) out.push_back(raw ? v : activate(info_.activation, v));
      row += len;
    }
    return;
  }
  TokenBatch tokens;
  ForwardOptions fo;
  for (size_t s = 0; s < pairs.size(); ++s) {
    for (size_t j = 0; j < pairs[s].ids.size(); ++j) {
      tokens.add(static_cast<int32_t>(pairs[s].ids[j]), static_cast<int32_t>(s),
                 static_cast<int32_t>(j));
    }
    fo.logits_rows.push_back(tokens.size() - 1);
  }
  KvCache cache = lm_->new_cache(static_cast<int64_t>(pairs.size()));
  ForwardResult r;
  lm_->forward(tokens, cache, fo, r);
  const int64_t vocab = lm_->info().vocab_size;
  for (size_t s = 0; s < pairs.size(); ++s) {
    const float yes = r.logits[s * vocab + info_.yes_id], no = r.logits[s * vocab + info_.no_id];
    if (raw) {
      out.push_back(yes - no);  // the log-odds of yes
      continue;
    }
    // torch: log_softmax([no, yes])[1].exp()
    const float m = std::max(yes, no);
    const float lse = m + std::log(std::exp(no - m) + std::exp(yes - m));
    out.push_back(std::exp(yes - lse));
  }
}

std::vector<float> Reranker::score_pairs(const std::vector<std::string>& a,
                                         const std::vector<std::string>& b,
                                         const RerankOptions& options) const {
  if (a.size() != b.size()) throw InvalidArgument("score_pairs needs as many firsts as seconds");
  if (options.batch_size <= 0) throw InvalidArgument("batch_size must be positive");
  std::vector<float> out;
  out.reserve(a.size() * info_.num_labels);
  for (size_t start = 0; start < a.size(); start += options.batch_size) {
    const size_t end = std::min(a.size(), start + static_cast<size_t>(options.batch_size));
    std::vector<PairTokens> chunk;
    for (size_t i = start; i < end; ++i) chunk.push_back(tokenize(a[i], b[i], options));
    run_chunk(chunk, options.raw, out);
  }
  return out;
}

std::vector<float> Reranker::score(const std::string& query,
                                   const std::vector<std::string>& documents,
                                   const RerankOptions& options) const {
  return score_pairs(std::vector<std::string>(documents.size(), query), documents, options);
}

std::vector<int64_t> rank_order(const std::vector<float>& scores) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return scores[x] > scores[y]; });
  return order;
}

}  // namespace hubzoo
