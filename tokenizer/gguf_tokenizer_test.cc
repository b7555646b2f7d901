// GGUF tokenizer metadata -> tokenizer.json: bad metadata is a ConfigError
// naming the key; ids are checked against transformers in
// python/tests/test_gguf_import.py.
#include "tokenizer/gguf_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <tuple>

#include "base/error.h"

namespace hubzoo {
namespace {

using ojson = nlohmann::ordered_json;

ojson spm_meta() {
  return {{"general.architecture", "llama"},
          {"tokenizer.ggml.model", "llama"},
          {"tokenizer.ggml.tokens", {"<unk>", "<s>", "\u2581", "a", "b", "ab", "\u2581ab"}},
          {"tokenizer.ggml.scores", {0.0, 0.0, -1.0, -2.0, -3.0, -1.5, -1.2}},
          {"tokenizer.ggml.token_type", {2, 3, 1, 1, 1, 1, 1}},
          {"tokenizer.ggml.bos_token_id", 1},
          {"tokenizer.ggml.unknown_token_id", 0}};
}

std::string tokenizer_error(const ojson& meta) {
  try {
    gguf_tokenizer_files(meta);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(GgufTokenizer, SentencepieceMergesFromScoresAndBos) {
  const GgufTokenizerFiles f = gguf_tokenizer_files(spm_meta());
  // generate_merges: best score first ("▁ab" -1.2 before "ab" -1.5).
  EXPECT_EQ(f.tokenizer["model"]["merges"],
            nlohmann::json::parse(R"([["\u2581", "ab"], ["a", "b"]])"));
  EXPECT_EQ(f.config["add_bos_token"], true);  // llama vocabularies default to BOS
  const Tokenizer tok = tokenizer_from_gguf_metadata(spm_meta(), "test.gguf");
  EXPECT_EQ(tok.encode("ab ab").ids, (std::vector<int64_t>{1, 6, 6}));
}

// The config alone (what a chat template reads) is the full build's config,
// without deriving merges; its keys are checked the same way.
TEST(GgufTokenizer, ConfigAloneEqualsTheFullBuildsConfig) {
  ojson m = spm_meta();
  m["tokenizer.chat_template"] = "{{ bos_token }}{{ messages[0]['content'] }}";
  m["tokenizer.ggml.add_eos_token"] = true;
  const ojson config = gguf_tokenizer_config(m);
  EXPECT_EQ(config, gguf_tokenizer_files(m).config);
  EXPECT_EQ(config["bos_token"], "<s>");
  EXPECT_EQ(config["unk_token"], "<unk>");
  EXPECT_EQ(config["add_eos_token"], true);
  EXPECT_EQ(config["chat_template"], "{{ bos_token }}{{ messages[0]['content'] }}");
  for (const auto& [key, value] : std::vector<std::pair<const char*, ojson>>{
           {"tokenizer.ggml.bos_token_id", 7}, {"tokenizer.chat_template", 5}}) {
    ojson bad = m;
    bad[key] = value;
    try {
      gguf_tokenizer_config(bad);
      ADD_FAILURE() << key << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

// Duplicated tokens: the last index wins the vocabulary and the score
// (dict(zip(tokens, scores))); a split into two vocabulary tokens is a merge.
TEST(GgufTokenizer, DuplicateTokensTakeTheLastScore) {
  ojson m = spm_meta();
  m["tokenizer.ggml.tokens"] = {"<unk>", "<s>", "a", "b", "ab", "ba", "ab"};
  m["tokenizer.ggml.scores"] = {0.0, 0.0, -1.0, -2.0, -9.0, -3.0, -0.5};
  m["tokenizer.ggml.token_type"] = {2, 3, 1, 1, 1, 1, 1};
  const GgufTokenizerFiles f = gguf_tokenizer_files(m);
  // "ab" scores -0.5 (its last entry), before "ba" at -3.
  EXPECT_EQ(f.tokenizer["model"]["merges"], nlohmann::json::parse(R"([["a", "b"], ["b", "a"]])"));
  EXPECT_EQ(f.tokenizer["model"]["vocab"]["ab"], 6);
}

// transformers' generate_merges as written: per token the splits into two
// vocabulary tokens sorted by the pieces' ids, then a stable sort by (score,
// len(left), len(right)) descending; dict semantics (a repeated token's last
// index and score).
std::vector<std::pair<std::string, std::string>> reference_merges(
    const std::vector<std::string>& tokens, const std::vector<double>& scores) {
  const auto length = [](const std::string& s) {
    return std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xc0) != 0x80; });
  };
  std::map<std::string, int64_t> id;
  std::map<std::string, double> score;
  std::vector<std::string> order;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!id.count(tokens[i])) order.push_back(tokens[i]);
    id[tokens[i]] = static_cast<int64_t>(i);
    score[tokens[i]] = scores[i];
  }
  struct Merge {
    std::string l, r;
    double score;
  };
  std::vector<Merge> merges;
  for (const std::string& t : order) {
    std::vector<Merge> local;
    for (size_t k = 1; k < t.size(); ++k) {
      if ((t[k] & 0xc0) == 0x80) continue;  // inside a character
      const std::string l = t.substr(0, k), r = t.substr(k);
      if (id.count(l) && id.count(r)) local.push_back({l, r, score[t]});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      return std::make_pair(id[a.l], id[a.r]) < std::make_pair(id[b.l], id[b.r]);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [&](const Merge& a, const Merge& b) {
    return std::make_tuple(a.score, length(a.l), length(a.r)) >
           std::make_tuple(b.score, length(b.l), length(b.r));
  });
  std::vector<std::pair<std::string, std::string>> out;
  for (const Merge& m : merges) out.emplace_back(m.l, m.r);
  return out;
}

// Many ties (four scores), repeated tokens, multi-byte characters, and enough
// tokens to take the two-thread path: the merges equal the reference's.
TEST(GgufTokenizer, DerivedMergesEqualTransformersOrderOnALargeVocabulary) {
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", "c", "\u2581", "\xC3\xA9"};
  std::vector<std::string> tokens = {"<unk>", "<s>"};
  std::vector<double> scores = {0.0, 0.0};
  std::vector<int> types = {2, 3};
  for (const auto& c : alphabet) {
    tokens.push_back(c);
    scores.push_back(-1.0);
    types.push_back(1);
  }
  while (tokens.size() < 40000) {
    std::string t;
    const int len = 2 + static_cast<int>(rng() % 6);
    for (int i = 0; i < len; ++i) t += alphabet[rng() % alphabet.size()];
    tokens.push_back(t);
    scores.push_back(-static_cast<double>(rng() % 4));
    types.push_back(1);
  }
  ojson m = spm_meta();
  m["tokenizer.ggml.tokens"] = tokens;
  m["tokenizer.ggml.scores"] = scores;
  m["tokenizer.ggml.token_type"] = types;
  const nlohmann::json merges = gguf_tokenizer_files(m).tokenizer["model"]["merges"];
  const auto expected = reference_merges(tokens, scores);
  ASSERT_GT(expected.size(), 40000u);
  ASSERT_EQ(merges.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(merges[i][0], expected[i].first) << i;
    ASSERT_EQ(merges[i][1], expected[i].second) << i;
  }
}

TEST(GgufTokenizer, BadMetadataIsNamed) {
  const std::vector<std::pair<const char*, ojson>> cases = {
      {"tokenizer.ggml.model", "bert"},
      {"tokenizer.ggml.model", 3},
      {"tokenizer.ggml.tokens", nullptr},
      {"tokenizer.ggml.tokens", ojson::array()},
      {"tokenizer.ggml.tokens", {1, 2}},
      {"tokenizer.ggml.scores", {1.0}},
      {"tokenizer.ggml.scores", {0.0, 0.0, std::nan(""), -2.0, -3.0, -1.5, -1.2}},
      {"tokenizer.ggml.token_type", "x"},
      {"tokenizer.ggml.merges", {"a b c"}},
      {"tokenizer.ggml.bos_token_id", 7},
      {"tokenizer.ggml.eos_token_id", -1},
      {"tokenizer.ggml.add_bos_token", 1},
      {"tokenizer.chat_template", 5},
      {"tokenizer.ggml.tokens", {std::string(5000, 'x')}},
  };
  for (const auto& [key, value] : cases) {
    ojson m = spm_meta();
    if (value.is_null()) {
      m.erase(key);
    } else {
      m[key] = value;
    }
    const std::string e = tokenizer_error(m);
    EXPECT_NE(e.find(std::string("'") + key + "'"), std::string::npos) << key << ": " << e;
  }
}

}  // namespace
}  // namespace hubzoo
