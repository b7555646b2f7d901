// Unigram language model (HF models/unigram): the Viterbi path of maximal
// total piece score over a lattice of vocabulary matches; unknown characters
// cost min_score - 10 and consecutive unknowns fuse into one token.
#include <cstdio>
#include <limits>

#include "base/error.h"
#include "io/json.h"
#include "tokenizer/token_models.h"

namespace hubzoo::tok {

namespace {

constexpr double kUnkPenalty = 10.0;

// Byte trie over the vocabulary for common-prefix search.
class Trie {
 public:
  void insert(std::string_view key, uint32_t id) {
    uint32_t node = 0;
    for (unsigned char b : key) {
      const uint64_t k = (static_cast<uint64_t>(node) << 8) | b;
      auto it = edges_.find(k);
      if (it == edges_.end()) {
        terminal_.push_back(-1);
        it = edges_.emplace(k, static_cast<uint32_t>(terminal_.size() - 1)).first;
      }
      node = it->second;
    }
    terminal_[node] = id;
  }
  // Calls fn(length, id) for every vocabulary piece that prefixes s[start:].
  template <typename F>
  void common_prefixes(std::string_view s, size_t start, F&& fn) const {
    uint32_t node = 0;
    for (size_t i = start; i < s.size(); ++i) {
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(s[i]));
      if (it == edges_.end()) return;
      node = it->second;
      if (terminal_[node] >= 0) fn(i + 1 - start, static_cast<uint32_t>(terminal_[node]));
    }
  }

 private:
  std::unordered_map<uint64_t, uint32_t> edges_;
  std::vector<int64_t> terminal_{-1};
};

class Unigram : public Model {
 public:
  Unigram(const Json& j, const Source& src) {
    const Json& vocab = field(j, "vocab", src);
    if (!vocab.is_array()) throw FormatError(src.file + ": Unigram 'vocab' must be a list");
    VocabMap map;
    uint32_t id = 0;
    for (const Json& entry : vocab) {
      if (!entry.is_array() || entry.size() != 2) {
        throw FormatError(src.file + ": Unigram vocab entry " + json_excerpt(entry) +
                          " is not [piece, score]");
      }
      const std::string piece = entry[0].get<std::string>();
      scores_.push_back(entry[1].get<double>());
      map[piece] = id;
      trie_.insert(piece, id);
      ++id;
    }
    for (double s : scores_) min_score_ = std::min(min_score_, s);
    set_vocab(std::move(map));
    if (j.contains("unk_id") && j["unk_id"].is_number()) {
      unk_id_ = static_cast<uint32_t>(
          to_uint(j["unk_id"], "Unigram 'unk_id'", src, std::numeric_limits<uint32_t>::max()));
    }
    byte_fallback_ = j.value("byte_fallback", false);
  }

  size_t vocab_size() const override { return scores_.size(); }  // duplicates counted, as HF

  std::vector<Token> tokenize(std::string_view s) const override {
    std::vector<Token> out;
    size_t offset = 0;
    for (const std::string& piece : encode(s)) {
      const Offsets offsets{offset, offset + piece.size()};
      offset += piece.size();
      if (auto id = token_to_id(piece)) {
        out.push_back({*id, piece, offsets});
        continue;
      }
      if (byte_fallback_) {
        if (auto bytes = byte_fallback_ids(piece)) {
          for (uint32_t id : *bytes) out.push_back({id, *id_to_token(id), offsets});
          continue;
        }
      }
      if (!unk_id_)
        throw InvalidArgument("Unigram: text needs an unk token but the model has no unk_id");
      out.push_back({*unk_id_, piece, offsets});
    }
    return out;
  }

 private:
  struct Node {
    uint32_t id = 0;
    double score = 0;
    int64_t starts_at = -1;
  };

  std::vector<std::string> encode(std::string_view s) const {
    if (s.empty()) return {};
    std::vector<Node> best(s.size() + 1);
    const double unk_score = min_score_ - kUnkPenalty;
    for (size_t start = 0, mblen = 0; start < s.size(); start += mblen) {
      decode_utf8(s, start, &mblen);
      const double here = best[start].score;
      bool has_single = false;
      trie_.common_prefixes(s, start, [&](size_t len, uint32_t id) {
        Node& target = best[start + len];
        const double cand = scores_[id] + here;
        if (target.starts_at < 0 || cand > target.score) {
          target = {id, cand, static_cast<int64_t>(start)};
        }
        has_single |= len == mblen;
      });
      if (!has_single) {
        if (!unk_id_)
          throw InvalidArgument("Unigram: text needs an unk token but the model has no unk_id");
        Node& target = best[start + mblen];
        const double cand = unk_score + here;
        if (target.starts_at < 0 || cand > target.score) {
          target = {*unk_id_, cand, static_cast<int64_t>(start)};
        }
      }
    }
    std::vector<std::string> pieces;
    std::string fused;
    for (size_t end = s.size(); end > 0;) {
      const Node& node = best[end];
      const auto start = static_cast<size_t>(node.starts_at);
      if (unk_id_ && node.id == *unk_id_) {  // fuse_unk is always on in HF
        fused.insert(0, s.substr(start, end - start));
      } else {
        if (!fused.empty()) pieces.push_back(std::move(fused)), fused.clear();
        pieces.emplace_back(s.substr(start, end - start));
      }
      end = start;
    }
    if (!fused.empty()) pieces.push_back(std::move(fused));
    return {pieces.rbegin(), pieces.rend()};
  }

  Trie trie_;
  std::vector<double> scores_;
  double min_score_ = 1e300;
  std::optional<uint32_t> unk_id_;
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<Model> make_unigram(const Json& j, const Source& src) {
  return std::make_unique<Unigram>(j, src);
}

}  // namespace hubzoo::tok
