// Unit tests of the tokenizer pipeline pieces; full parity against HF
// tokenizers lives in python/tests/test_tokenizer_parity.py.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace hubzoo::tok {
namespace {

const std::filesystem::path kRepo = std::filesystem::path(__FILE__).parent_path().parent_path();

std::vector<std::string> pieces(const std::vector<NormalizedString>& v) {
  std::vector<std::string> out;
  for (const auto& n : v) out.push_back(n.get());
  return out;
}

std::vector<std::string> pre_tokenize(const char* json, std::string_view text) {
  auto pre = make_pre_tokenizer(Json::parse(json), {"test.json"});
  PreTokenizedString p(text);
  pre->pre_tokenize(p);
  std::vector<std::string> out;
  for (const Split& s : p.splits()) out.push_back(s.normalized.get());
  return out;
}

TEST(TokenizerUnicode, ByteLevelAlphabetRoundTrips) {
  EXPECT_EQ(byte_to_char(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(byte_to_char('A'), U'A');
  for (int b = 0; b < 256; ++b) EXPECT_EQ(char_to_byte(byte_to_char(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(char_to_byte(U'\u4E2D'), -1);
}

TEST(TokenizerUnicode, LossyDecodingReplacesMaximalInvalidSubparts) {
  EXPECT_EQ(utf8_lossy("a\xF0\x9F"), "a\xEF\xBF\xBD");  // truncated 4-byte char
  EXPECT_EQ(utf8_lossy("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x91\x8D"), "\xF0\x9F\x91\x8D");  // whole 👍 kept
  EXPECT_THROW(validate_utf8("ok\xC3"), InvalidArgument);
  EXPECT_NO_THROW(validate_utf8("h\xC3\xA9llo"));
}

TEST(TokenizerNormalizedString, NfdKeepsAlignmentToOriginal) {
  NormalizedString s("x\xC3\xA9y");  // "xéy"
  s.normalize(NormForm::NFD);
  EXPECT_EQ(s.get(), "xe\xCC\x81y");
  // 'e' and the combining acute both come from original bytes [1, 3).
  EXPECT_EQ(s.normalized_to_original({1, 2}), (Offsets{1, 3}));
  EXPECT_EQ(s.normalized_to_original({2, 4}), (Offsets{1, 3}));
  EXPECT_EQ(s.normalized_to_original({4, 5}), (Offsets{3, 4}));
  s.normalize(NormForm::NFC);
  EXPECT_EQ(s.get(), "x\xC3\xA9y");
}

TEST(TokenizerNormalizedString, LowercaseAndStripTrackOffsets) {
  NormalizedString s("  \xC4\xB0X ");  // "  İX "
  s.lowercase();
  EXPECT_EQ(s.get(), "  i\xCC\x87x ");  // İ lowercases to two characters
  s.strip(true, true);
  EXPECT_EQ(s.get(), "i\xCC\x87x");
  EXPECT_EQ(s.normalized_to_original({0, s.size()}), (Offsets{2, 5}));
}

TEST(TokenizerNormalizedString, SplitBehaviours) {
  const NormalizedString s("a-b--c");
  const Matches m = find_matches([](char32_t c) { return c == U'-'; }, s.get());
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(s.split(m, SplitBehavior::Removed)), (V{"a", "b", "c"}));
  EXPECT_EQ(pieces(s.split(m, SplitBehavior::Isolated)), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(pieces(s.split(m, SplitBehavior::MergedWithPrevious)), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(pieces(s.split(m, SplitBehavior::MergedWithNext)), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(pieces(s.split(m, SplitBehavior::Contiguous)), (V{"a", "-", "b", "--", "c"}));
}

TEST(TokenizerPreTokenizer, ByteLevelSplitsLikeGpt2) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true})",
                         "Hello world's  2024!\n"),
            (V{"Hello", "\xC4\xA0world", "'s", "\xC4\xA0",
               "\xC4\xA0"
               "2024",
               "!", "\xC4\x8A"}));
}

TEST(TokenizerPreTokenizer, BertMetaspaceDigits) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(R"({"type":"BertPreTokenizer"})", "Hi, you  there!"),
            (V{"Hi", ",", "you", "there", "!"}));
  EXPECT_EQ(
      pre_tokenize(
          R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":true})",
          "a b"),
      (V{"\xE2\x96\x81"
         "a",
         "\xE2\x96\x81"
         "b"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Digits","individual_digits":true})", "ab12c"),
            (V{"ab", "1", "2", "c"}));
  EXPECT_EQ(pre_tokenize(R"({"type":"Digits","individual_digits":false})", "ab12c"),
            (V{"ab", "12", "c"}));
}

TEST(TokenizerModel, BpeAppliesMergesByRank) {
  const Json j = Json::parse(R"({"type":"BPE","dropout":null,"unk_token":"<unk>",
      "vocab":{"<unk>":0,"a":1,"b":2,"c":3,"ab":4,"bc":5,"abc":6},
      "merges":[["b","c"],["a","b"],["a","bc"]]})");
  auto model = make_model(j, {"test.json"});
  auto ids = [&](std::string_view w) {
    std::vector<uint32_t> out;
    for (const Token& t : model->tokenize(w)) out.push_back(t.id);
    return out;
  };
  EXPECT_EQ(ids("abc"), (std::vector<uint32_t>{6}));  // b+c first (rank 0), then a+bc
  EXPECT_EQ(ids("abab"), (std::vector<uint32_t>{4, 4}));
  EXPECT_EQ(ids("axb"), (std::vector<uint32_t>{1, 0, 2}));  // x is unknown
}

TEST(TokenizerModel, WordPieceGreedyLongestMatch) {
  const Json j =
      Json::parse(R"({"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
      "max_input_chars_per_word":100,"vocab":{"[UNK]":0,"un":1,"##aff":2,"##able":3,"u":4}})");
  auto model = make_model(j, {"test.json"});
  const auto tokens = model->tokenize("unaffable");
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[1].value, "##aff");
  EXPECT_EQ(tokens[2].offsets, (Offsets{5, 9}));
  EXPECT_EQ(model->tokenize("unx")[0].value, "[UNK]");
}

TEST(TokenizerErrors, UnknownComponentTypeNamesTypeAndFile) {
  Json j = Json::parse(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},
                           "normalizer":{"type":"Frobnicate"}})");
  try {
    Tokenizer::from_json(j, "/x/tokenizer.json");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("Frobnicate"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("/x/tokenizer.json"), std::string::npos);
  }
  EXPECT_THROW(Tokenizer::from_file(kRepo / "no" / "such.json"), FileError);
  j["normalizer"] = nullptr;
  j["model"]["merges"] = Json::array({"a b c"});
  EXPECT_THROW(Tokenizer::from_json(j), FormatError);
}

// {"type": "Sequence", "<list>": [ ... `levels` times ... {"type": leaf} ]}
std::string nested_sequences(const std::string& list, const std::string& leaf, int levels) {
  std::string open, close;
  for (int i = 0; i < levels; ++i) {
    open += R"({"type": "Sequence", ")" + list + R"(": [)";
    close += "]}";
  }
  return open + R"({"type": ")" + leaf + R"("})" + close;
}

// Building (and running) a Sequence recurses once per level: the nesting is
// bounded for every kind of component, with a FormatError naming the file.
TEST(TokenizerErrors, NestedSequencesAreBounded) {
  struct Kind {
    const char* key;
    const char* list;
    const char* leaf;
  };
  for (const Kind& k :
       {Kind{"normalizer", "normalizers", "Lowercase"},
        Kind{"pre_tokenizer", "pretokenizers", "Whitespace"}, Kind{"decoder", "decoders", "Fuse"},
        Kind{"post_processor", "processors", "ByteLevel"}}) {
    Json j = Json::parse(R"({"model":{"type":"WordLevel","vocab":{"a":0},"unk_token":"a"}})");
    j[k.key] = Json::parse(nested_sequences(k.list, k.leaf, kMaxSequenceDepth));
    EXPECT_NO_THROW(Tokenizer::from_json(j, "/x/tokenizer.json")) << k.key;
    j[k.key] = Json::parse(nested_sequences(k.list, k.leaf, kMaxSequenceDepth + 1));
    try {
      Tokenizer::from_json(j, "/x/tokenizer.json");
      ADD_FAILURE() << "expected FormatError for " << k.key;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("/x/tokenizer.json: " + std::string(k.key) +
                                           " Sequences nested deeper than the limit of 16"),
                std::string::npos)
          << e.what();
    }
  }
}

// 100k nested Sequences crashed the loader (stack overflow); the file is
// refused at parse, and a value built in memory before building anything.
TEST(TokenizerErrors, DeepTokenizerJsonIsRefused) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("hubzoo_deep_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "tokenizer.json";
  std::ofstream(file) << R"({"model":{"type":"WordLevel","vocab":{"a":0},"unk_token":"a"},)"
                      << R"("normalizer": )" << nested_sequences("normalizers", "Lowercase", 100000)
                      << "}";
  try {
    Tokenizer::from_file(file);
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nested deeper"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
  Json deep = 1;
  for (int i = 0; i < 100000; ++i) {
    Json a = Json::array();
    a.push_back(std::move(deep));
    deep = std::move(a);
  }
  Json j = Json::parse(R"({"model":{"type":"WordLevel","vocab":{"a":0},"unk_token":"a"}})");
  j["extra"] = std::move(deep);
  EXPECT_THROW(Tokenizer::from_json(j, "mem"), FormatError);
}

// Integers are JSON integers in range, not whatever nlohmann's get<>() casts
// them to (found by fuzz/tokenizer_fuzz.cc: a vocab id of 3.7e29 was undefined
// behaviour), and padding lengths are bounded before any encoding is padded.
TEST(TokenizerErrors, IntegersAreCheckedNotCast) {
  const auto expect_format_error = [](const std::string& json, const std::string& words) {
    try {
      Tokenizer::from_json(Json::parse(json), "/x/tokenizer.json");
      ADD_FAILURE() << "expected FormatError for " << json;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  const std::string model = R"("model":{"type":"WordPiece","unk_token":"a","vocab":{"a":)";
  expect_format_error("{" + model + "3.7e29}}}", "vocab id of 'a' must be an integer");
  expect_format_error("{" + model + "-1}}}", "vocab id of 'a' must be an integer");
  expect_format_error("{" + model + "1.5}}}", "vocab id of 'a' must be an integer");
  expect_format_error("{" + model + "4294967296}}}", "vocab id of 'a'");
  expect_format_error("{" + model + R"(0}},"padding":{"strategy":{"Fixed":1000000000000000000}}})",
                      "padding 'Fixed' must be an integer in [0, 1048576]");
  expect_format_error("{" + model + R"(0}},"padding":{"strategy":"BatchLongest","pad_id":1e300}})",
                      "'pad_id' must be a 64-bit integer");
  expect_format_error("{" + model + R"(0}},"truncation":{"max_length":-5}})",
                      "truncation 'max_length'");
  const std::string tp =
      R"(0}},"post_processor":{"type":"TemplateProcessing","special_tokens":{"a":)";
  expect_format_error("{" + model + tp + R"({"id":"a","ids":[1e30],"tokens":["a"]}}}})",
                      "special token id must be a 64-bit integer");
  expect_format_error("{" + model + tp + R"({"id":"a","ids":7,"tokens":["a"]}}}})",
                      "special token 'a' ids must be an array");
  // Valid integers still load.
  const Tokenizer ok = Tokenizer::from_json(
      Json::parse("{" + model + R"(0,"b":4294967295}},"padding":{"strategy":{"Fixed":4}}})"));
  EXPECT_EQ(ok.token_to_id("b"), 4294967295);
  EXPECT_EQ(ok.encode("a").ids.size(), 4u);
  // A signed JSON integer (as C++ code builds it, apply_tokenizer_config) is accepted too.
  Json j = Json::parse("{" + model + "0}}}");
  j["truncation"] = {{"max_length", int64_t{1}}};
  EXPECT_EQ(Tokenizer::from_json(j).encode("a a a").ids.size(), 1u);
}

// A deep value in an error message is quoted as a bounded excerpt (dump()
// recursed once per level and copied it whole); past the depth limit the
// value is refused before anything recurses over it.
TEST(TokenizerErrors, DeepValuesInMessagesDoNotRecurse) {
  const auto split_behavior = [](int depth) {
    const std::string deep = std::string(depth, '[') + std::string(depth, ']');
    try {
      Tokenizer::from_json(Json::parse(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},
        "pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":)" +
                                       deep + "}}"));
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string shallow = split_behavior(100);
  EXPECT_NE(shallow.find("unknown split behavior [[[["), std::string::npos) << shallow;
  EXPECT_LT(shallow.size(), 300u) << shallow;
  const std::string deep = split_behavior(100000);
  EXPECT_NE(deep.find("nested deeper than the limit"), std::string::npos) << deep;
}

TEST(TokenizerSmolLM2, EncodesSpecialTokensAndCharOffsets) {
  const Tokenizer t = Tokenizer::from_pretrained(kRepo / "models" / "SmolLM2-135M-Instruct");
  const Encoding e = t.encode("<|im_start|>user\nHi \xF0\x9F\x91\x8D there<|im_end|>");
  EXPECT_EQ(e.ids, (std::vector<int64_t>{1, 4093, 198, 26843, 15107, 235, 231, 665, 2}));
  EXPECT_EQ(e.tokens[4], "\xC4\xA0\xC3\xB0\xC5\x81");            // "ĠðŁ"
  EXPECT_EQ(e.offsets[4], (std::pair<size_t, size_t>{19, 21}));  // characters, not bytes
  EXPECT_EQ(e.offsets[8], (std::pair<size_t, size_t>{27, 37}));
  EXPECT_EQ(t.decode(e.ids), "<|im_start|>user\nHi \xF0\x9F\x91\x8D there<|im_end|>");
  EXPECT_EQ(t.decode(e.ids, true), "user\nHi \xF0\x9F\x91\x8D there");
  EXPECT_THROW(t.encode("bad \xC3"), InvalidArgument);
}

TEST(TokenizerSmolLM2, DecodeStreamNeverSplitsACharacter) {
  const Tokenizer t = Tokenizer::from_pretrained(kRepo / "models" / "SmolLM2-135M-Instruct");
  DecodeStream stream(t);
  EXPECT_EQ(stream.step(26843), "Hi");
  EXPECT_EQ(stream.step(15107), std::nullopt);  // " " + first bytes of 👍
  EXPECT_EQ(stream.step(235), std::nullopt);
  EXPECT_EQ(stream.step(231), " \xF0\x9F\x91\x8D");
  EXPECT_EQ(stream.step(665), " there");
}

TEST(TokenizerMiniLM, BertPipelineWithPadding) {
  const Tokenizer t =
      Tokenizer::from_file(kRepo / "models" / "all-MiniLM-L6-v2" / "tokenizer.json");
  const Encoding e =
      t.encode("H\xC3\xA9llo, WORLD! \xE4\xBD\xA0\xE5\xA5\xBD");  // "Héllo, WORLD! 你好"
  ASSERT_EQ(e.size(), 128u);  // fixed padding from tokenizer.json
  EXPECT_EQ(std::vector<int64_t>(e.ids.begin(), e.ids.begin() + 9),
            (std::vector<int64_t>{101, 7592, 1010, 2088, 999, 100, 100, 102, 0}));
  EXPECT_EQ(e.offsets[3], (std::pair<size_t, size_t>{7, 12}));
  EXPECT_EQ(e.attention_mask[7], 1);
  EXPECT_EQ(e.attention_mask[8], 0);
  EXPECT_EQ(t.decode(std::vector<int64_t>(e.ids.begin(), e.ids.begin() + 5), true),
            "hello, world!");
}

TEST(TokenizerMiniLM, SnapshotBehavesAsAutoTokenizer) {
  // No padding: the file's is dropped, as transformers drops it.
  const Tokenizer t = Tokenizer::from_pretrained(kRepo / "models" / "all-MiniLM-L6-v2");
  const Encoding e = t.encode("Hello , world !");
  EXPECT_EQ(e.ids, (std::vector<int64_t>{101, 7592, 1010, 2088, 999, 102}));
  EXPECT_EQ(t.decode(e.ids, true), "hello, world!");  // the WordPiece decoder's cleanup
}

}  // namespace
}  // namespace hubzoo::tok
