// Options every model-loading subcommand shares.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"

namespace hubzoo::cli {

void add_load_options(CLI::App* cmd, std::string& gguf_file, std::string& quantize) {
  cmd->add_option("--gguf-file", gguf_file,
                  "one .gguf file of the snapshot folder or repo to load (as gguf_file=)");
  cmd->add_option("--quantize", quantize,
                  "quantize fp32/bf16/f16 weights on load to a GGUF block type (q8_0, q4_0, q4_k, "
                  "q5_k, q6_k, ...) or llama-quantize's mix q4_k_m / q5_k_m");
}

LoadOptions load_options(int threads, const std::string& dtype, const std::string& mode,
                         const std::string& quantize, const std::string& gguf_file) {
  return LoadOptions::parse(threads, dtype, mode, quantize, gguf_file);
}

void note_ignored_modules(const ModelInfo& info) {
  for (const auto& [prefix, reason] : info.ignored_modules) {
    std::fprintf(stderr, "hubzoo: not loaded: %s* (%s)\n", prefix.c_str(), reason.c_str());
  }
}

}  // namespace hubzoo::cli
