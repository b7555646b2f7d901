#include <algorithm>
#include <map>
#include <vector>

#include "base/error.h"
#include "base/heap.h"
#include "hub/snapshot.h"
#include "models/encoder.h"
#include "models/families.h"
#include "models/gguf_model.h"
#include "models/seq2seq.h"

namespace hubzoo {
namespace {

using Loader = std::unique_ptr<CausalLM> (*)(const LoadContext&);

const std::map<std::string, Loader>& registry() {
  static const std::map<std::string, Loader> r = {
      {"LlamaForCausalLM", load_llama},
      {"Qwen2ForCausalLM", load_qwen2},
      {"Qwen3ForCausalLM", load_qwen3},
      {"Qwen3MoeForCausalLM", load_qwen3_moe},
      {"Gemma2ForCausalLM", load_gemma2},       // models/gemma.cc
      {"Gemma3ForCausalLM", load_gemma3_text},  // models/gemma.cc
      {"Gemma4ForCausalLM", load_gemma4_text},  // models/gemma4.cc
      {"Olmo2ForCausalLM", load_olmo2},         // models/olmo2.cc
      {"GraniteForCausalLM", load_granite},     // models/granite.cc
      {"Qwen2MoeForCausalLM", load_qwen2_moe},  // models/qwen2_moe.cc
      {"MistralForCausalLM", load_mistral},     // models/mistral.cc
      {"Phi3ForCausalLM", load_phi3},           // models/phi3.cc
      {"SmolLM3ForCausalLM", load_smollm3},     // models/smollm3.cc
      // The text towers of multimodal checkpoints: models/gemma_multimodal.cc.
      {"Gemma3ForConditionalGeneration", load_gemma3_conditional},
      {"Gemma4ForConditionalGeneration", load_gemma4_conditional},
  };
  return r;
}

// Encoders: BERT-family architectures (and their model_type, for configs
// without `architectures`); every causal LM above, and its base model as
// sentence-transformers saves it (e.g. Qwen3-Embedding), also loads as a
// decoder embedder (models/decoder_encoder.cc).
using EncoderLoader = std::unique_ptr<Encoder> (*)(const LoadContext&);

const std::map<std::string, EncoderLoader>& encoder_registry() {
  static const std::map<std::string, EncoderLoader> r = {
      {"BertModel", load_bert_encoder},
      {"BertForMaskedLM", load_bert_encoder},
      {"BertForPreTraining", load_bert_encoder},
      {"RobertaModel", load_roberta_encoder},
      {"RobertaForMaskedLM", load_roberta_encoder},
      {"XLMRobertaModel", load_roberta_encoder},
      {"XLMRobertaForMaskedLM", load_roberta_encoder},
      {"T5EncoderModel", load_t5_encoder},
      // Cross-encoders (engine/reranker.cc reads the classification head).
      {"BertForSequenceClassification", load_bert_encoder},
      {"RobertaForSequenceClassification", load_roberta_encoder},
      {"XLMRobertaForSequenceClassification", load_roberta_encoder},
  };
  return r;
}

const std::map<std::string, std::string>& base_decoders() {
  static const std::map<std::string, std::string> r = {{"LlamaModel", "LlamaForCausalLM"},
                                                       {"Qwen2Model", "Qwen2ForCausalLM"},
                                                       {"Qwen3Model", "Qwen3ForCausalLM"},
                                                       // EmbeddingGemma (bidirectional)
                                                       {"Gemma3TextModel", "Gemma3ForCausalLM"}};
  return r;
}

const std::map<std::string, std::string>& encoder_model_types() {
  static const std::map<std::string, std::string> r = {
      {"bert", "BertModel"}, {"roberta", "RobertaModel"}, {"xlm-roberta", "XLMRobertaModel"}};
  return r;
}

// The snapshot's config.json, or FileError naming the folder that lacks it.
JsonObject read_snapshot_config(const std::filesystem::path& dir) {
  const std::filesystem::path config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw FileError(dir.string() + ": no config.json in the snapshot directory");
  }
  return JsonObject(read_json_file(config_path), config_path.string());
}

}  // namespace

std::vector<std::string> supported_encoders() {
  std::vector<std::string> names;
  for (const auto& [name, _] : encoder_registry()) names.push_back(name);
  for (const auto& name : supported_causal_lms()) names.push_back(name);
  for (const auto& [name, _] : base_decoders()) names.push_back(name);
  return names;
}

std::unique_ptr<Encoder> load_encoder(const std::string& model, const LoadOptions& options) {
  const std::filesystem::path dir = resolve_snapshot(model);
  const JsonObject config = read_snapshot_config(dir);
  std::string arch;
  if (const auto archs = config.maybe<std::vector<std::string>>("architectures")) {
    if (!archs->empty()) arch = (*archs)[0];
  }
  if (arch.empty()) {
    const auto type = encoder_model_types().find(config.get_or<std::string>("model_type", ""));
    if (type == encoder_model_types().end()) {
      throw ConfigError(config.where() + ": no 'architectures' and no known encoder 'model_type'");
    }
    arch = type->second;
  }
  LoadContext ctx;
  ctx.snapshot = dir;
  ctx.config = config;
  ctx.pool = ThreadPool::shared(options.num_threads);
  ctx.numerics = options.numerics;
  ctx.needs_lm_head = false;
  const auto base = base_decoders().find(arch);
  const auto decoder = registry().find(base == base_decoders().end() ? arch : base->second);
  if (decoder != registry().end()) {
    auto encoder = decoder_as_encoder(decoder->second(ctx));
    release_free_heap();
    return encoder;
  }
  auto it = encoder_registry().find(arch);
  if (it == encoder_registry().end()) {
    std::string supported;
    for (const auto& name : supported_encoders())
      supported += (supported.empty() ? "" : ", ") + name;
    throw ConfigError(config.where() + ": architecture '" + arch +
                      "' is not supported as an encoder (supported: " + supported + ")");
  }
  auto encoder = it->second(ctx);
  release_free_heap();
  return encoder;
}

std::vector<std::string> supported_causal_lms() {
  std::vector<std::string> names;
  for (const auto& [name, _] : registry()) names.push_back(name);
  return names;
}

ModelSource resolve_model_source(const std::string& model, const std::string& gguf_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ModelSource src;
  if (fs::path(model).extension() == ".gguf" && fs::is_regular_file(model, ec)) {
    if (!gguf_file.empty())
      throw InvalidArgument("gguf_file '" + gguf_file + "' given with a .gguf path: " + model);
    src.gguf_file = model;
    src.snapshot = fs::path(model).parent_path();
    return src;
  }
  src.snapshot = resolve_snapshot(model);
  if (!gguf_file.empty()) {
    const fs::path name(gguf_file);
    if (name.has_parent_path() || name.is_absolute() || gguf_file == "." || gguf_file == "..")
      throw InvalidArgument("gguf_file must be a file name inside the snapshot, got '" + gguf_file +
                            "'");
    src.gguf_file = src.snapshot / name;
    if (!fs::is_regular_file(src.gguf_file, ec))
      throw FileError(src.gguf_file.string() + ": no such GGUF file in " + src.snapshot.string());
    return src;
  }
  if (!fs::exists(src.snapshot / "config.json", ec)) {  // a GGUF repo: which file?
    std::vector<std::string> ggufs;
    for (const auto& e : fs::directory_iterator(src.snapshot, ec)) {
      if (e.path().extension() == ".gguf") ggufs.push_back(e.path().filename().string());
    }
    std::sort(ggufs.begin(), ggufs.end());
    if (!ggufs.empty()) {
      std::string list;
      for (const auto& g : ggufs) list += (list.empty() ? "" : ", ") + g;
      throw InvalidArgument(src.snapshot.string() +
                            " holds GGUF files but no config.json; pick one "
                            "with --gguf-file NAME (gguf_file=): " +
                            list);
    }
  }
  return src;
}

std::unique_ptr<CausalLM> load_causal_lm(const std::string& model, const LoadOptions& options) {
  const ModelSource src = resolve_model_source(model, options.gguf_file);
  const std::filesystem::path& dir = src.snapshot;
  GgufModel gguf;
  if (!src.gguf_file.empty()) gguf = open_gguf_model(src.gguf_file);
  const JsonObject config = src.gguf_file.empty() ? read_snapshot_config(dir) : gguf.config;
  const auto archs = config.get<std::vector<std::string>>("architectures");
  if (archs.empty()) throw ConfigError(config.where() + ": field 'architectures' is empty");
  auto it = registry().find(archs[0]);
  if (base_decoders().count(archs[0])) {
    throw ConfigError(config.where() + ": architecture '" + archs[0] +
                      "' is a base model without a language-model head; load it as an "
                      "encoder (hubzoo embed, hubzoo.Embedder)");
  }
  if (it == registry().end()) {
    std::string supported;
    for (const auto& name : supported_causal_lms()) {
      supported += (supported.empty() ? "" : ", ") + name;
    }
    throw ConfigError(config.where() + ": architecture '" + archs[0] +
                      "' is not supported (supported: " + supported + ")");
  }
  LoadContext ctx;
  ctx.snapshot = dir;
  ctx.config = config;
  ctx.pool = ThreadPool::shared(options.num_threads);
  ctx.numerics = options.numerics;
  ctx.checkpoint = gguf.checkpoint;
  ctx.gguf_file = src.gguf_file;
  auto lm = it->second(ctx);
  release_free_heap();
  return lm;
}

}  // namespace hubzoo
