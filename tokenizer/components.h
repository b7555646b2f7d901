// The stages of the tokenizer.json pipeline, each built from its JSON object.
// An unknown "type" is a FormatError naming the type and the file.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/encoding.h"
#include "tokenizer/normalized_string.h"

namespace hubzoo::tok {

using Json = nlohmann::json;

// Where a component came from, for error messages.
struct Source {
  std::string file;
  int depth = 0;  // Sequences this component is nested in
};

// Real tokenizer.json files nest a Sequence at most once or twice; building
// and running a Sequence recurses once per level, so the nesting is bounded.
inline constexpr int kMaxSequenceDepth = 16;
// The source for a Sequence's parts: one level deeper, or FormatError naming
// the file, the kind of Sequence and the limit.
Source nested(const Source& src, const char* what);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedString& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedString& s) const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Tokens this processor adds around a single sequence.
  virtual size_t added_tokens() const = 0;
  virtual Encoding process(Encoding e, bool add_special_tokens) const = 0;
  // Tokens added around a pair of sequences (HF added_tokens(is_pair=true)).
  virtual size_t added_tokens_pair() const { return added_tokens(); }
  // HF process_encodings: one or two encodings in, the processed ones out (a
  // processor that adds special tokens merges a pair into one; the caller
  // concatenates what is left). The base handles a single encoding only.
  virtual std::vector<Encoding> process_encodings(std::vector<Encoding> encodings,
                                                  bool add_special_tokens) const;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// Null JSON -> nullptr.
std::unique_ptr<Normalizer> make_normalizer(const Json& j, const Source& src);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const Source& src);
std::unique_ptr<PostProcessor> make_post_processor(const Json& j, const Source& src);
std::unique_ptr<Decoder> make_decoder(const Json& j, const Source& src);

// transformers' clean_up_tokenization (" ." -> "." and the like), for decode.
std::string clean_up_tokenization(std::string text);

// Shared JSON helpers: a required field, or FormatError naming it.
const Json& field(const Json& j, const char* key, const Source& src);
// Integers from tokenizer.json. nlohmann's get<integer>() converts silently: a
// float out of range (1e30 as an id: undefined behaviour), a fraction, a
// negative number into an unsigned type (-1 -> 4294967295). These take JSON
// integers only, in [0, max] / int64; else FormatError naming `what`.
uint64_t to_uint(const Json& v, const std::string& what, const Source& src, uint64_t max);
int64_t to_int(const Json& v, const std::string& what, const Source& src);
// Optional integer fields of object `j`: `fallback` when absent or null.
uint64_t uint_or(const Json& j, const char* key, uint64_t fallback, uint64_t max,
                 const Source& src);
int64_t int_or(const Json& j, const char* key, int64_t fallback, const Source& src);
std::string type_of(const Json& j, const char* what, const Source& src);
[[noreturn]] void unknown_type(const char* what, const std::string& type, const Source& src);
SplitBehavior parse_behavior(const Json& j, const Source& src);

}  // namespace hubzoo::tok
