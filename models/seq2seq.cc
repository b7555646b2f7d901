// The encoder-decoder registry: config.json's architectures (or model_type) to a family.
#include <map>

#include "base/error.h"
#include "base/heap.h"
#include "hub/snapshot.h"
#include "models/seq2seq.h"

namespace hubzoo {
namespace {

using Seq2SeqFactory = std::unique_ptr<Seq2SeqLM> (*)(const LoadContext&);

const std::map<std::string, Seq2SeqFactory>& seq2seq_registry() {
  static const std::map<std::string, Seq2SeqFactory> r = {
      {"T5ForConditionalGeneration", &load_t5},
      {"MT5ForConditionalGeneration", &load_t5},
  };
  return r;
}

std::string architecture_of(const JsonObject& c) {
  if (const auto archs = c.maybe<std::vector<std::string>>("architectures")) {
    if (!archs->empty()) return (*archs)[0];
  }
  const std::string type = c.get_or<std::string>("model_type", "");
  if (type == "t5") return "T5ForConditionalGeneration";
  if (type == "mt5") return "MT5ForConditionalGeneration";
  return "";
}

}  // namespace

bool is_seq2seq_config(const JsonObject& config) {
  return config.get_or<bool>("is_encoder_decoder", false) ||
         seq2seq_registry().count(architecture_of(config)) > 0;
}

std::vector<std::string> supported_seq2seq_lms() {
  std::vector<std::string> names;
  for (const auto& [name, _] : seq2seq_registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Seq2SeqLM> load_seq2seq_lm(const std::string& model, const LoadOptions& options) {
  const std::filesystem::path dir = resolve_snapshot(model);
  const std::filesystem::path path = dir / "config.json";
  if (!std::filesystem::exists(path)) {
    throw FileError(dir.string() + ": no config.json in the snapshot directory");
  }
  LoadContext ctx;
  ctx.snapshot = dir;
  ctx.config = JsonObject(read_json_file(path), path.string());
  ctx.pool = ThreadPool::shared(options.num_threads);
  ctx.numerics = options.numerics;
  if (options.numerics.quantize || options.numerics.int8 || !options.gguf_file.empty()) {
    throw InvalidArgument(
        "encoder-decoder models load from safetensors in float32 or bfloat16 "
        "(no quantization, int8 mode or GGUF yet)");
  }
  const std::string arch = architecture_of(ctx.config);
  const auto it = seq2seq_registry().find(arch);
  if (it == seq2seq_registry().end()) {
    std::string supported;
    for (const auto& name : supported_seq2seq_lms()) {
      supported += (supported.empty() ? "" : ", ") + name;
    }
    throw ConfigError(ctx.config.where() + ": architecture '" + arch +
                      "' is not a supported encoder-decoder (supported: " + supported + ")");
  }
  auto lm = it->second(ctx);
  release_free_heap();
  return lm;
}

}  // namespace hubzoo
