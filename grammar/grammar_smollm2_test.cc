// The matcher over SmolLM2's real byte-level vocabulary (a prepared model).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_vocabulary.h"

namespace hubzoo::grammar {
namespace {

namespace fs = std::filesystem;
const fs::path kRepo = fs::path(__FILE__).parent_path().parent_path();
const fs::path kSmolLM2 = kRepo / "models" / "SmolLM2-135M-Instruct";

class GrammarSmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(fs::exists(kSmolLM2 / "tokenizer.json")) << kSmolLM2 << " missing";
    tokenizer_ = new Tokenizer(Tokenizer::from_pretrained(kSmolLM2));
    vocab_ = TokenVocabulary::from_tokenizer(*tokenizer_);
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  static Tokenizer* tokenizer_;
  static std::shared_ptr<const TokenVocabulary> vocab_;
};
Tokenizer* GrammarSmolLM2::tokenizer_ = nullptr;
std::shared_ptr<const TokenVocabulary> GrammarSmolLM2::vocab_;

// Special tokens named to from_tokenizer stand for their text (tool-call
// markers a grammar writes); the others stay excluded, and a grammar over the
// vocabulary allows the marker token exactly where its text is allowed.
TEST_F(GrammarSmolLM2, SpecialTokensAsTextWhenNamed) {
  const auto start = tokenizer_->token_to_id("<|im_start|>");
  ASSERT_TRUE(start);
  EXPECT_EQ(vocab_->bytes(*start), nullptr);
  const auto marked = TokenVocabulary::from_tokenizer(*tokenizer_, {"<|im_start|>"});
  ASSERT_NE(marked->bytes(*start), nullptr);
  EXPECT_EQ(*marked->bytes(*start), "<|im_start|>");
  EXPECT_EQ(marked->bytes(2), nullptr);  // <|im_end|>: not named
  const auto space_a = tokenizer_->encode(" a", false).ids;
  EXPECT_EQ(*marked->bytes(space_a[0]), " a");  // ordinary tokens unchanged
  const auto g = Grammar::from_regex("<\\|im_start\\|>x");
  GrammarMatcher m(g, marked, {});
  std::vector<float> logits(static_cast<size_t>(marked->size()), 0.0f);
  m.mask_logits(logits.data(), marked->size());
  EXPECT_EQ(logits[static_cast<size_t>(*start)], 0.0f);
  EXPECT_EQ(logits[static_cast<size_t>(space_a[0])], -std::numeric_limits<float>::infinity());
}

TEST_F(GrammarSmolLM2, VocabularyIsByteLevelAndEveryAllowedTokenKeepsAPrefix) {
  EXPECT_EQ(vocab_->kind(), VocabKind::kByteLevel);
  const auto space_a = tokenizer_->encode(" a", false).ids;
  ASSERT_EQ(space_a.size(), 1u);
  EXPECT_EQ(*vocab_->bytes(space_a[0]), " a");
  EXPECT_EQ(vocab_->bytes(2), nullptr);  // <|im_end|>: special
  auto g = Grammar::from_json_schema_text(
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},"required":["name","n"]})");
  GrammarMatcher m(g, vocab_, {2});
  ASSERT_TRUE(m.accept_bytes(R"({"name":"Jo)"));
  // Checked against the automaton byte by byte, independently of the trie walk.
  const auto& words = m.allowed_bitmask();
  int64_t allowed = 0;
  for (int64_t id = 0; id < vocab_->size(); ++id) {
    const bool in_mask = (words[id >> 5] >> (id & 31)) & 1;
    const std::string* b = vocab_->bytes(id);
    bool ok = false;
    if (b) {
      GrammarMatcher probe(g, vocab_, {2});
      ok = probe.accept_bytes(std::string(R"({"name":"Jo)") + *b);
    }
    ASSERT_EQ(in_mask, ok) << id << " " << (b ? *b : "<none>");
    allowed += in_mask;
  }
  EXPECT_GT(allowed, 40000);  // inside a string almost every token fits
}

TEST_F(GrammarSmolLM2, MaskCost) {
  auto g = Grammar::from_json_schema_text(
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
      "tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","tags"]})");
  const std::string text = R"({"name":"Ada Lovelace","age":36,"tags":["math","poetry"]})";
  GrammarMatcher m(g, vocab_, {2});
  const auto ids = tokenizer_->encode(text, false).ids;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t id : ids) {
    ASSERT_TRUE(m.is_allowed(id)) << id;
    ASSERT_TRUE(m.accept(id));
  }
  EXPECT_TRUE(m.is_allowed(2));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%zu tokens: %.2f ms per mask (%lld masks, %lld cache hits, %lld trie nodes)\n",
              ids.size(), 1e3 * s / static_cast<double>(ids.size()),
              static_cast<long long>(m.stats().masks), static_cast<long long>(m.stats().cache_hits),
              static_cast<long long>(m.stats().trie_nodes_visited));
}

}  // namespace
}  // namespace hubzoo::grammar
