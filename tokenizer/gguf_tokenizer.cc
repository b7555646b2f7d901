// GGUF tokenizer metadata -> tokenizer.json (transformers 5.23
// integrations/gguf/gguf_tokenizer_mapping.py and the tokenizer classes it
// hands the vocabulary to: GPT2Tokenizer, LlamaTokenizer, GemmaTokenizer).
#include "tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "tokenizer/token_models.h"

namespace hubzoo {
namespace {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

constexpr size_t kMaxTokens = size_t{1} << 22;
constexpr size_t kMaxMerges = size_t{1} << 23;
constexpr size_t kMaxTokenBytes = 4096;
// Deriving merges splits every token at every character: bounded by sum(L^2).
constexpr uint64_t kMaxMergeWork = uint64_t{1} << 33;
// From this many tokens on, merges are derived on two threads (a 32k
// vocabulary takes ~30 ms on one).
constexpr size_t kTwoThreadMergeTokens = size_t{1} << 15;

ConfigError key_error(const std::string& key, const std::string& what) {
  return ConfigError("GGUF metadata: key '" + key + "' " + what);
}

const ojson* find(const ojson& m, const std::string& key) {
  const auto it = m.find(key);
  return it == m.end() || it->is_null() ? nullptr : &*it;
}

// A string array (tokens, merges), each entry bounded.
std::vector<std::string> string_array(const ojson& m, const std::string& key, size_t max_count) {
  const ojson* v = find(m, key);
  if (!v) throw key_error(key, "is missing");
  if (!v->is_array()) throw key_error(key, "must be an array of strings");
  if (v->size() > max_count) {
    throw key_error(key, "has " + std::to_string(v->size()) + " entries (at most " +
                             std::to_string(max_count) + ")");
  }
  std::vector<std::string> out;
  out.reserve(v->size());
  for (const auto& s : *v) {
    if (!s.is_string()) throw key_error(key, "must be an array of strings");
    out.push_back(s.get<std::string>());
    if (out.back().size() > kMaxTokenBytes) {
      throw key_error(key, "has an entry of " + std::to_string(out.back().size()) +
                               " bytes (at most " + std::to_string(kMaxTokenBytes) + ")");
    }
  }
  return out;
}

// A number array of exactly `n` entries (scores, token types), or empty when absent.
std::vector<double> number_array(const ojson& m, const std::string& key, size_t n) {
  const ojson* v = find(m, key);
  if (!v) return {};
  if (!v->is_array() || v->size() != n) {
    throw key_error(key, "must be an array of " + std::to_string(n) + " numbers");
  }
  std::vector<double> out;
  out.reserve(n);
  for (const auto& x : *v) {
    if (!x.is_number()) throw key_error(key, "must be an array of numbers");
    out.push_back(x.get<double>());
    // A NaN score has no place in transformers' sort of merges either.
    if (std::isnan(out.back())) throw key_error(key, "holds NaN");
  }
  return out;
}

// Code points of valid UTF-8 (GgufFile rejects invalid UTF-8; here too).
std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) throw ConfigError("GGUF metadata: token is not valid UTF-8");
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    cps.push_back(cp);
    i += n;
  }
  return cps;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// GPT-2's bytes_to_unicode: byte -> code point.
const std::vector<uint32_t>& byte_alphabet() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      t[b] = printable ? b : 256 + extra++;
    }
    return t;
  }();
  return table;
}

bool in_byte_alphabet(const std::string& token) {
  static const std::unordered_set<uint32_t> alphabet(byte_alphabet().begin(),
                                                     byte_alphabet().end());
  for (uint32_t cp : code_points(token)) {
    if (!alphabet.count(cp)) return false;
  }
  return true;
}

std::string byte_spelling(const std::string& token) {
  std::string out;
  for (char c : token) append_utf8(out, byte_alphabet()[static_cast<unsigned char>(c)]);
  return out;
}

// Python's str.isspace().
bool py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Gemma: a whitespace-only token holding a space is spelled with U+2581 per character.
std::string gemma_respell(const std::string& token) {
  if (token.find(' ') == std::string::npos) return token;
  const auto cps = code_points(token);
  if (!std::all_of(cps.begin(), cps.end(), py_space)) return token;
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) out += "\u2581";
  return out;
}

// {token: index} as a Python dict comprehension builds it: the last index of a
// repeated token wins, keys in first-appearance order.
struct Vocab {
  std::unordered_map<std::string, int64_t, tok::StringHash, std::equal_to<>> index;
  std::vector<std::string> order;  // unique tokens, first appearance
};

Vocab make_vocab(const std::vector<std::string>& tokens) {
  Vocab v;
  v.index.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (v.index.emplace(tokens[i], static_cast<int64_t>(i)).second) {
      v.order.push_back(tokens[i]);
    } else {
      v.index[tokens[i]] = static_cast<int64_t>(i);
    }
  }
  return v;
}

// One split of a token into two vocabulary tokens: token[0, split) + token[split, end).
// One merge: *token split at byte `split` (the file's "a b" merges skip the
// space: skip 1). Derived merges know their pieces' ids (in the vocabulary
// they were derived from) and sort by score and lengths in code points.
struct MergeCandidate {
  const std::string* token;
  uint32_t split;                // bytes
  uint32_t left_len, right_len;  // code points
  int64_t left_id, right_id;     // -1: unknown
  double score;
  int64_t merged_id = -1;  // the token's own id, when derived
  uint32_t skip = 0;
  std::string_view left() const { return std::string_view(*token).substr(0, split); }
  std::string_view right() const { return std::string_view(*token).substr(split + skip); }
};

// Byte offsets where the code points of valid UTF-8 `s` start, and s.size()
// last (GgufFile rejects invalid UTF-8; here too). Reuses `out`.
void code_point_starts(std::string_view s, std::vector<uint32_t>& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) throw ConfigError("GGUF metadata: token is not valid UTF-8");
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) {
        throw ConfigError("GGUF metadata: token is not valid UTF-8");
      }
    }
    out.push_back(static_cast<uint32_t>(i));
    i += n;
  }
  out.push_back(static_cast<uint32_t>(s.size()));
}

// A Vocab's tokens -> ids for generate_merges' ~2M lookups (Gemma): open
// addressing over (hash tag, entry) pairs, 8 bytes a slot, so a lookup is one
// cache line and a string comparison only when the tag matches (a
// std::unordered_map walks a node list: two or three dependent misses).
class TokenIndex {
 public:
  explicit TokenIndex(const Vocab& v) : order_(v.order) {
    size_t n = 16;
    while (n < 2 * order_.size()) n *= 2;
    slots_.assign(n, Slot{0, kEmpty});
    mask_ = n - 1;
    ids_.reserve(order_.size());
    for (size_t i = 0; i < order_.size(); ++i) {
      ids_.push_back(v.index.find(std::string_view(order_[i]))->second);
      const uint64_t h = hash(order_[i]);
      size_t s = h & mask_;
      while (slots_[s].entry != kEmpty) s = (s + 1) & mask_;  // entries are unique
      slots_[s] = {static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(i)};
    }
  }
  // The id of `token`, or -1.
  int64_t find(std::string_view token) const {
    const uint64_t h = hash(token);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t s = h & mask_; slots_[s].entry != kEmpty; s = (s + 1) & mask_) {
      if (slots_[s].tag == tag && order_[slots_[s].entry] == token) return ids_[slots_[s].entry];
    }
    return -1;
  }
  // The id of the vocabulary's entry i (its last index among the tokens).
  int64_t id_of_entry(size_t i) const { return ids_[i]; }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  struct Slot {
    uint32_t tag, entry;
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

  const std::vector<std::string>& order_;
  std::vector<Slot> slots_;
  std::vector<int64_t> ids_;
  size_t mask_ = 0;
};

// transformers' generate_merges(vocab, vocab_scores): every split of every
// token into two vocabulary tokens, per token ordered by the pieces' ids, then
// all sorted by (score, len(left), len(right)) descending, stably.
// `score_of_index[i]` is the score of the token whose last occurrence is index
// i (dict(zip(tokens, scores)) keeps the last). Pieces' ids are `vocab`'s.
//
// A token's splits differ in len(left), so the per-token order by ids never
// survives the sort, and the stable sort's ties are broken by token order:
// one std::sort by (score, len(left), len(right) descending, token order) is
// the same order (scores are never NaN: number_array). That leaves the
// tokens free to be split in any order, so a large vocabulary (Gemma's 262k
// tokens, ~2.5M lookups) is split on two threads, a half each.
std::vector<MergeCandidate> generate_merges(const Vocab& vocab,
                                            const std::vector<double>& score_of_index) {
  uint64_t work = 0;
  for (const auto& t : vocab.order) work += static_cast<uint64_t>(t.size()) * t.size();
  if (work > kMaxMergeWork) {
    throw ConfigError("GGUF metadata: 'tokenizer.ggml.tokens' is too large to derive merges from");
  }
  const TokenIndex index(vocab);
  const auto splits = [&](size_t begin, size_t end) {
    std::vector<MergeCandidate> out;
    std::vector<uint32_t> starts;
    for (size_t i = begin; i < end; ++i) {
      const std::string& token = vocab.order[i];
      const std::string_view t(token);
      code_point_starts(t, starts);
      const double score = score_of_index[static_cast<size_t>(index.id_of_entry(i))];
      const size_t cps = starts.size() - 1;
      for (size_t k = 1; k < cps; ++k) {
        const int64_t l = index.find(t.substr(0, starts[k]));
        if (l < 0) continue;
        const int64_t r = index.find(t.substr(starts[k]));
        if (r < 0) continue;
        out.push_back({&token, starts[k], static_cast<uint32_t>(k), static_cast<uint32_t>(cps - k),
                       l, r, score, index.id_of_entry(i)});
      }
    }
    return out;
  };
  const size_t n = vocab.order.size();
  std::vector<MergeCandidate> merges;
  if (n >= kTwoThreadMergeTokens && std::thread::hardware_concurrency() > 1) {
    std::future<std::vector<MergeCandidate>> back =
        std::async(std::launch::async, splits, n / 2, n);
    merges = splits(0, n / 2);  // on throwing, ~future waits for the other half
    const std::vector<MergeCandidate> rest = back.get();
    merges.insert(merges.end(), rest.begin(), rest.end());
  } else {
    merges = splits(0, n);
  }
  std::sort(merges.begin(), merges.end(), [](const auto& a, const auto& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_len != b.left_len) return a.left_len > b.left_len;
    if (a.right_len != b.right_len) return a.right_len > b.right_len;
    return std::less<>()(a.token, b.token);  // vocab.order's order
  });
  return merges;
}

// The file's merges ("a b"): where each splits; one that is not two tokens is an error.
std::vector<MergeCandidate> file_merges(const std::vector<std::string>& merges) {
  std::vector<MergeCandidate> out;
  out.reserve(merges.size());
  for (const auto& m : merges) {
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || m.find(' ', sp + 1) != std::string::npos) {
      throw key_error("tokenizer.ggml.merges", "has an entry '" + m + "' that is not two tokens");
    }
    out.push_back({.token = &m,
                   .split = static_cast<uint32_t>(sp),
                   .left_len = 0,
                   .right_len = 0,
                   .left_id = -1,
                   .right_id = -1,
                   .score = 0.0,
                   .merged_id = -1,
                   .skip = 1});
  }
  return out;
}

// {token: id}; keys inserted in order with a hint (a std::map underneath:
// ~3x faster than one search per key at Gemma's 262k tokens).
json vocab_json(const Vocab& v) {
  std::vector<const std::pair<const std::string, int64_t>*> sorted;
  sorted.reserve(v.index.size());
  for (const auto& entry : v.index) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  json out = json::object();
  auto& obj = out.get_ref<json::object_t&>();
  for (const auto* e : sorted) obj.emplace_hint(obj.end(), e->first, e->second);
  return out;
}

// Pre-tokenizer regexes by tokenizer.ggml.pre (GGUF_PRE_TOKENIZER_SPLITS).
const char* split_regex(const std::string& pre) {
  static const char* llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* qwen2 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
      "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* qwen35 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
      "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* tekken =
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
      "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
      "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* gpt4o =
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
      "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
      "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const std::map<std::string, const char*> table = {
      {"llama3", llama3},       {"llama-v3", llama3},
      {"llama-bpe", llama3},    {"falcon3", llama3},
      {"falcon-h1", llama3},    {"pixtral", llama3},
      {"midm-2.0", llama3},     {"lfm2", llama3},
      {"jina-v5-nano", llama3}, {"dbrx", llama3},
      {"smaug-bpe", llama3},    {"tekken", tekken},
      {"qwen2", qwen2},         {"deepseek-r1-qwen", qwen2},
      {"kormo", qwen2},         {"f2llmv2", qwen2},
      {"megrez", qwen2},        {"qwen35", qwen35},
      {"gpt-4o", gpt4o},        {"llama4", gpt4o},
      {"kanana2", gpt4o},       {"talkie", gpt4o},
      {"minimax-m2", gpt4o},
  };
  const auto it = table.find(pre);
  return it == table.end() ? nullptr : it->second;
}

enum class Kind { kByteLevel, kLlama, kGemma };

json byte_level_pre(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

json replace_json(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

// normalizer, pre_tokenizer, decoder of the tokenizer class the file maps to.
void set_pipeline(Kind kind, json& t) {
  const std::string meta = "\u2581";
  t["normalizer"] = nullptr;
  if (kind == Kind::kByteLevel) {
    t["pre_tokenizer"] = byte_level_pre(true);
    t["decoder"] = {{"type", "ByteLevel"},
                    {"add_prefix_space", true},
                    {"trim_offsets", true},
                    {"use_regex", true}};
    return;
  }
  json seq = json::array({replace_json(meta, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (kind == Kind::kLlama) {
    t["pre_tokenizer"] = {{"type", "Metaspace"},
                          {"replacement", meta},
                          {"prepend_scheme", "first"},
                          {"split", false}};
    seq.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  } else {
    t["normalizer"] = replace_json(" ", meta);
    t["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"String", " "}}},
                          {"behavior", "MergedWithPrevious"},
                          {"invert", false}};
  }
  t["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(seq)}};
}

struct TokenizerData {
  std::string model, pre, arch;
  std::vector<std::string> tokens;
  std::vector<double> scores, types;
  bool has_merges = false;
  std::vector<std::string> merges;
};

// The tokenizer metadata, validated; `merges`: also read tokenizer.ggml.merges.
TokenizerData read_tokenizer_data(const ojson& m, bool merges = true) {
  TokenizerData d;
  const ojson* model = find(m, "tokenizer.ggml.model");
  if (!model) throw key_error("tokenizer.ggml.model", "is missing");
  if (!model->is_string()) throw key_error("tokenizer.ggml.model", "must be a string");
  d.model = model->get<std::string>();
  if (d.model != "gpt2" && d.model != "llama") {
    throw key_error("tokenizer.ggml.model",
                    "'" + d.model + "' is not supported (supported: gpt2, llama)");
  }
  if (const ojson* pre = find(m, "tokenizer.ggml.pre"); pre && pre->is_string()) {
    d.pre = pre->get<std::string>();
  }
  if (const ojson* arch = find(m, "general.architecture"); arch && arch->is_string()) {
    d.arch = arch->get<std::string>();
  }
  d.tokens = string_array(m, "tokenizer.ggml.tokens", kMaxTokens);
  if (d.tokens.empty()) throw key_error("tokenizer.ggml.tokens", "is empty");
  d.scores = number_array(m, "tokenizer.ggml.scores", d.tokens.size());
  d.types = number_array(m, "tokenizer.ggml.token_type", d.tokens.size());
  d.has_merges = find(m, "tokenizer.ggml.merges") != nullptr;
  if (d.has_merges && merges) d.merges = string_array(m, "tokenizer.ggml.merges", kMaxMerges);
  return d;
}

// The BPE model: vocabulary (respelled per kind) and merges.
struct BpeParts {
  Vocab vocab;                         // as respelled per kind: the model's
  Vocab derived_from;                  // the spelling merges were derived in, when not `vocab`'s
  std::vector<MergeCandidate> merges;  // in rank order
  bool ids_known = false;              // merges' ids are `vocab`'s
  json options;                        // the JSON model object without vocab and merges
};

void bpe_parts(Kind kind, const TokenizerData& d, BpeParts& p) {
  std::vector<std::string> spelled = d.tokens;
  if (kind == Kind::kByteLevel) {
    for (auto& t : spelled) {
      if (!in_byte_alphabet(t)) t = byte_spelling(t);
    }
  } else if (kind == Kind::kGemma) {
    for (auto& t : spelled) t = gemma_respell(t);
  }
  p.vocab = make_vocab(spelled);
  if (d.has_merges) {
    p.merges = file_merges(d.merges);
  } else if (kind == Kind::kGemma) {
    std::vector<double> position(spelled.size());  // GemmaConverter: score = -index
    for (size_t i = 0; i < spelled.size(); ++i) position[i] = -static_cast<double>(i);
    p.merges = generate_merges(p.vocab, position);
    p.ids_known = true;
  } else {
    if (d.scores.empty()) throw key_error("tokenizer.ggml.scores", "is missing (no merges either)");
    // generate_merges runs over the file's own spelling (byte-level: before respelling).
    if (spelled == d.tokens) {
      p.merges = generate_merges(p.vocab, d.scores);
      p.ids_known = true;
    } else {
      p.derived_from = make_vocab(d.tokens);
      p.merges = generate_merges(p.derived_from, d.scores);
    }
  }
  p.options = {{"type", "BPE"},
               {"dropout", nullptr},
               {"unk_token", kind == Kind::kGemma ? json("<unk>") : json(nullptr)},
               {"continuing_subword_prefix", kind == Kind::kByteLevel ? json("") : json(nullptr)},
               {"end_of_word_suffix", kind == Kind::kByteLevel ? json("") : json(nullptr)},
               {"fuse_unk", kind != Kind::kByteLevel},
               {"byte_fallback", kind != Kind::kByteLevel},
               {"ignore_merges", false}};
}

// The tokenizer.json model object: options, vocab and merges as [left, right].
json bpe_model_json(const BpeParts& p) {
  json model = p.options;
  model["vocab"] = vocab_json(p.vocab);
  json merges = json::array();
  auto& pairs = merges.get_ref<json::array_t&>();
  pairs.reserve(p.merges.size());
  for (const auto& m : p.merges) {
    json::array_t pair;
    pair.reserve(2);
    pair.emplace_back(std::string(m.left()));
    pair.emplace_back(std::string(m.right()));
    pairs.emplace_back(std::move(pair));
  }
  model["merges"] = std::move(merges);
  return model;
}

// The model bpe_model_json describes, built from the tables: merge ids as
// make_bpe(json) looks them up (left, right, left + right in the vocabulary;
// the GGUF kinds have no continuing-subword prefix), taken from the derivation
// where it ran over the same vocabulary.
std::unique_ptr<tok::Model> bpe_model_from_parts(const BpeParts& p, const std::string& source) {
  tok::VocabMap vocab;
  vocab.reserve(p.vocab.index.size());
  for (const auto& [token, id] : p.vocab.index) vocab.emplace(token, static_cast<uint32_t>(id));
  std::vector<tok::BpeMerge> merges;
  merges.reserve(p.merges.size());
  std::string merged;
  for (const auto& m : p.merges) {
    if (p.ids_known) {
      merges.push_back({static_cast<uint32_t>(m.left_id), static_cast<uint32_t>(m.right_id),
                        static_cast<uint32_t>(m.merged_id)});
      continue;
    }
    merged.assign(m.left());
    merged.append(m.right());
    const auto a = p.vocab.index.find(m.left()), b = p.vocab.index.find(m.right()),
               ab = p.vocab.index.find(std::string_view(merged));
    if (a == p.vocab.index.end() || b == p.vocab.index.end() || ab == p.vocab.index.end()) {
      throw FormatError(source + ": BPE merge '" + std::string(m.left()) + " " +
                        std::string(m.right()) + "' uses a token missing from the vocab");
    }
    merges.push_back({static_cast<uint32_t>(a->second), static_cast<uint32_t>(b->second),
                      static_cast<uint32_t>(ab->second)});
  }
  return tok::make_bpe(p.options, std::move(vocab), merges, tok::Source{source});
}

// Added tokens as tokenizers' AddedVocabulary assigns them ids.
class AddedTokens {
 public:
  explicit AddedTokens(const Vocab& vocab) : vocab_(vocab) {}
  void add(const std::string& content, bool special) {
    if (content.empty() || by_content_.count(content)) return;
    int64_t id;
    if (const auto it = vocab_.index.find(content); it != vocab_.index.end()) {
      id = it->second;
    } else {
      const auto model_size = static_cast<int64_t>(vocab_.index.size());
      id = max_id_ >= model_size ? max_id_ + 1 : model_size;
    }
    max_id_ = std::max(max_id_, id);
    by_content_[content] = id;
    tokens_[id] = {{"id", id},          {"content", content}, {"single_word", false},
                   {"lstrip", false},   {"rstrip", false},    {"normalized", false},
                   {"special", special}};
  }
  bool has(const std::string& content) const { return by_content_.count(content) > 0; }
  int64_t id(const std::string& content) const { return by_content_.at(content); }
  json to_json() const {
    json out = json::array();
    for (const auto& [id, t] : tokens_) out.push_back(t);
    return out;
  }

 private:
  const Vocab& vocab_;
  std::map<std::string, int64_t> by_content_;
  std::map<int64_t, json> tokens_;
  int64_t max_id_ = -1;
};

// tokenizer.ggml.<key> as a token, or null.
json special_token(const ojson& m, const std::string& key, const std::vector<std::string>& tokens) {
  const ojson* v = find(m, "tokenizer.ggml." + key);
  if (!v) return nullptr;
  if (!v->is_number_integer() || v->get<int64_t>() < 0 ||
      v->get<int64_t>() >= static_cast<int64_t>(tokens.size())) {
    throw key_error("tokenizer.ggml." + key,
                    "= " + v->dump() + " is not a token id below " + std::to_string(tokens.size()));
  }
  return tokens[static_cast<size_t>(v->get<int64_t>())];
}

bool bool_key(const ojson& m, const std::string& key, bool fallback) {
  const ojson* v = find(m, key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw key_error(key, "must be a boolean");
  return v->get<bool>();
}

// TokenizersBackend.update_post_processor.
json post_processor(const json& config, const AddedTokens& added) {
  const bool bos = config["add_bos_token"].get<bool>() && config["bos_token"].is_string();
  const bool eos = config["add_eos_token"].get<bool>() && config["eos_token"].is_string();
  auto special = [](const json& token, int type) {
    return json{{"SpecialToken", {{"id", token}, {"type_id", type}}}};
  };
  auto seq = [](const char* id, int type) {
    return json{{"Sequence", {{"id", id}, {"type_id", type}}}};
  };
  json single = json::array(), pair = json::array(), tokens = json::object();
  const json b = config["bos_token"].is_string() ? json(config["bos_token"]) : json();
  const json e = config["eos_token"].is_string() ? json(config["eos_token"]) : json();
  auto entry = [&](const json& token) {
    const std::string s = token.get<std::string>();
    tokens[s] = {{"id", s}, {"ids", json::array({added.id(s)})}, {"tokens", json::array({s})}};
  };
  if (bos) entry(b);
  if (eos) entry(e);
  if (bos) single.push_back(special(b, 0));
  single.push_back(seq("A", 0));
  if (eos) single.push_back(special(e, 0));
  pair = single;
  if (bos) pair.push_back(special(b, 1));
  pair.push_back(seq("B", 1));
  if (eos) pair.push_back(special(e, 1));
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", tokens}};
}

// tokenizer_config.json's entries from the metadata (`tokens`: the file's own
// spelling). Needs neither the vocabulary nor the merges.
ojson config_from(const ojson& metadata, const std::string& model,
                  const std::vector<std::string>& tokens) {
  ojson c;
  c["add_bos_token"] = bool_key(metadata, "tokenizer.ggml.add_bos_token", model == "llama");
  c["add_eos_token"] = bool_key(metadata, "tokenizer.ggml.add_eos_token", false);
  c["bos_token"] = special_token(metadata, "bos_token_id", tokens);
  c["eos_token"] = special_token(metadata, "eos_token_id", tokens);
  c["unk_token"] = special_token(metadata, "unknown_token_id", tokens);
  c["pad_token"] = special_token(metadata, "padding_token_id", tokens);
  c["clean_up_tokenization_spaces"] = false;
  if (const ojson* tmpl = find(metadata, "tokenizer.chat_template")) {
    if (!tmpl->is_string()) throw key_error("tokenizer.chat_template", "must be a string");
    c["chat_template"] = *tmpl;
  }
  return c;
}

// Everything but the model's JSON vocab and merges: tokenizer.json with
// "model" holding only the options, the config, and the BPE tables. `data`
// owns the strings the merges point into.
struct Built {
  TokenizerData data;
  BpeParts parts;
  json tokenizer;
  ojson config;
};

void build(const ojson& metadata, Built& b) {
  if (!metadata.is_object()) throw ConfigError("GGUF metadata: not an object");
  b.data = read_tokenizer_data(metadata);
  const TokenizerData& d = b.data;
  const bool gemma_arch = d.arch == "gemma" || d.arch == "gemma2" || d.arch == "gemma3";
  const Kind kind = d.model == "gpt2" ? Kind::kByteLevel : gemma_arch ? Kind::kGemma : Kind::kLlama;
  json& t = b.tokenizer;
  t = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  bpe_parts(kind, d, b.parts);
  const Vocab& vocab = b.parts.vocab;
  set_pipeline(kind, t);
  if (const char* regex = split_regex(d.pre)) {
    t["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Split"},
                                                          {"pattern", {{"Regex", regex}}},
                                                          {"behavior", "Isolated"},
                                                          {"invert", false}},
                                                         byte_level_pre(false)})}};
  }
  AddedTokens added(vocab);
  for (size_t i = 0; i < d.types.size(); ++i) {  // CONTROL (3) -> special
    if (d.types[i] == 3 && (kind != Kind::kByteLevel || in_byte_alphabet(d.tokens[i]))) {
      added.add(d.tokens[i], true);
    }
  }
  for (size_t i = 0; i < d.types.size(); ++i) {  // USER_DEFINED (4) -> plain
    if (d.types[i] == 4 && (vocab.index.count(d.tokens[i]) || added.has(d.tokens[i]))) {
      added.add(d.tokens[i], false);
    }
  }
  ojson& c = b.config;
  c = config_from(metadata, d.model, d.tokens);
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (c[k].is_string()) added.add(c[k].get<std::string>(), true);
  }
  t["added_tokens"] = added.to_json();
  t["post_processor"] = post_processor(json::parse(c.dump()), added);
  t["model"] = b.parts.options;
}

}  // namespace

GgufTokenizerFiles gguf_tokenizer_files(const nlohmann::ordered_json& metadata) {
  Built b;
  build(metadata, b);
  b.tokenizer["model"] = bpe_model_json(b.parts);
  return {std::move(b.tokenizer), std::move(b.config)};
}

nlohmann::ordered_json gguf_tokenizer_config(const nlohmann::ordered_json& metadata) {
  if (!metadata.is_object()) throw ConfigError("GGUF metadata: not an object");
  const TokenizerData d = read_tokenizer_data(metadata, /*merges=*/false);
  return config_from(metadata, d.model, d.tokens);
}

Tokenizer tokenizer_from_gguf_metadata(const nlohmann::ordered_json& metadata,
                                       const std::string& source) {
  // gguf_tokenizer_files' tokenizer.json, with the model built from the tables
  // rather than written to JSON and parsed back (a second, for Gemma).
  Built b;
  build(metadata, b);
  const std::string src = source + " (tokenizer metadata)";
  Tokenizer tok = Tokenizer::from_json(b.tokenizer, bpe_model_from_parts(b.parts, src), src);
  tok.apply_tokenizer_config(json::parse(b.config.dump()), src);
  return tok;
}

}  // namespace hubzoo
