// Rerankers: a score for each (query, document) pair.
//
// Cross-encoders as sentence-transformers' CrossEncoder runs them
// (BertForSequenceClassification, (XLM-)RobertaForSequenceClassification):
// the pair is encoded as tokenizer(query, document, truncation=True,
// max_length=max_length) does (pair template, token types, longest_first),
// the encoder runs it, the classification head reads the first token (BERT:
// pooler dense+tanh, then classifier; RoBERTa: classifier.dense+tanh, then
// classifier.out_proj) and the activation CrossEncoder picks is applied
// (config_sentence_transformers.json / config.json `sentence_transformers`
// activation_fn; else Sigmoid for one label, Identity for more).
//
// Decoder rerankers of the Qwen3-Reranker kind (a *ForCausalLM checkpoint):
// the model card's prompt (system prefix, "<Instruct>: ...\n<Query>: ...\n
// <Document>: ...", assistant suffix), score = softmax([no, yes] logits at
// the last position))[yes].
//
// Every pair is its own sequence of a ragged batch: a score does not depend
// on what else is in the batch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/weights.h"
#include "models/encoder.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo {

struct RerankerOptions {
  int num_threads = 0;  // 0: all cores
  Numerics numerics;
  int64_t max_length = 0;  // tokens of a pair; 0: the model's (CrossEncoder's max_length)
};

struct RerankOptions {
  bool raw = false;  // logits, before the activation (TEI raw_scores)
  // Decoder rerankers: the <Instruct> line (nullopt: the model card's default).
  std::optional<std::string> instruction;
  int64_t batch_size = 32;  // pairs per forward pass
};

struct RerankerInfo {
  std::filesystem::path snapshot;
  std::string architecture;
  bool decoder = false;             // the yes/no recipe of a causal LM
  int64_t num_labels = 1;           // scores per pair
  std::string activation;           // "sigmoid", "identity", "tanh"; decoder: "softmax[no,yes]"
  int64_t max_length = 0;           // tokens of a pair, special tokens and prompt included
  int64_t yes_id = -1, no_id = -1;  // decoder: the answer tokens
};

// One pair as the model gets it.
struct PairTokens {
  std::vector<int64_t> ids, type_ids;
};

class Reranker {
 public:
  // Throws FileError / ConfigError / TensorMappingError naming what is wrong.
  static std::unique_ptr<Reranker> load(const std::string& model,
                                        const RerankerOptions& options = {});
  ~Reranker();

  const RerankerInfo& info() const { return info_; }

  // [documents.size(), num_labels] scores of (query, document) pairs, row-major.
  // Throws InvalidArgument for text that is not UTF-8, batch_size <= 0.
  std::vector<float> score(const std::string& query, const std::vector<std::string>& documents,
                           const RerankOptions& options = {}) const;
  // [pairs, num_labels] for arbitrary (a, b) pairs.
  std::vector<float> score_pairs(const std::vector<std::string>& a,
                                 const std::vector<std::string>& b,
                                 const RerankOptions& options = {}) const;
  PairTokens tokenize(const std::string& query, const std::string& document,
                      const RerankOptions& options = {}) const;
  // Tokens of the pair before truncation to max_length (special tokens and
  // the decoder's prompt included).
  int64_t full_length(const std::string& query, const std::string& document,
                      const RerankOptions& options = {}) const;

 private:
  struct Head;
  Reranker() = default;
  void load_cross_encoder(const std::filesystem::path& dir, const RerankerOptions& options);
  void load_decoder(const std::filesystem::path& dir, const RerankerOptions& options);
  // Scores of a chunk of tokenized pairs, appended to out.
  void run_chunk(const std::vector<PairTokens>& pairs, bool raw, std::vector<float>& out) const;

  RerankerInfo info_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Encoder> encoder_;  // cross-encoder
  std::unique_ptr<Head> head_;
  std::unique_ptr<CausalLM> lm_;  // decoder reranker
  std::vector<int64_t> prefix_ids_, suffix_ids_;
};

// Indices of scores (one per document) from highest to lowest; ties keep input order.
std::vector<int64_t> rank_order(const std::vector<float>& scores);

}  // namespace hubzoo
