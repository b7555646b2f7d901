#include <map>

#include "base/error.h"
#include "hub/snapshot.h"
#include "models/families.h"

namespace hubzoo {
namespace {

using Loader = std::unique_ptr<CausalLM> (*)(const LoadContext&);

const std::map<std::string, Loader>& registry() {
  static const std::map<std::string, Loader> r = {
      {"LlamaForCausalLM", load_llama},
      {"Qwen2ForCausalLM", load_qwen2},
      {"Qwen3ForCausalLM", load_qwen3},
  };
  return r;
}

}  // namespace

std::vector<std::string> supported_causal_lms() {
  std::vector<std::string> names;
  for (const auto& [name, _] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<CausalLM> load_causal_lm(const std::string& model, const LoadOptions& options) {
  const std::filesystem::path dir = resolve_snapshot(model);
  const std::filesystem::path config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) {
    throw FileError(dir.string() + ": no config.json in the snapshot directory");
  }
  JsonObject config(read_json_file(config_path), config_path.string());
  const auto archs = config.get<std::vector<std::string>>("architectures");
  if (archs.empty()) throw ConfigError(config.where() + ": field 'architectures' is empty");
  auto it = registry().find(archs[0]);
  if (it == registry().end()) {
    std::string supported;
    for (const auto& name : supported_causal_lms()) {
      supported += (supported.empty() ? "" : ", ") + name;
    }
    throw ConfigError(config.where() + ": architecture '" + archs[0] +
                      "' is not supported (supported: " + supported + ")");
  }
  LoadContext ctx{dir, config, std::make_shared<ThreadPool>(options.num_threads),
                  options.numerics};
  return it->second(ctx);
}

}  // namespace hubzoo
