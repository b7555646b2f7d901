// `hubzoo embed`: sentence embeddings through the snapshot's
// sentence-transformers pipeline (engine/embedder.h), one vector per text.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/embedder.h"
#include "ops/matmul.h"

namespace hubzoo::cli {

CLI::App* add_embed_command(CLI::App& app, EmbedArgs& a) {
  auto* cmd =
      app.add_subcommand("embed", "sentence embeddings, as sentence-transformers computes them");
  cmd->add_option("-m,--model", a.model, "snapshot directory or repo id in the HF cache")
      ->required();
  cmd->add_option("--format", a.format, "text: one line of numbers per text; json: one object")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--dtype", a.dtype)->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--mode", a.mode)->check(CLI::IsMember({"eager", "fused", "bf16dot", "int8"}));
  auto* norm = cmd->add_flag_callback(
      "--normalize", [&a] { a.normalize = true; }, "L2-normalise the vectors");
  auto* no_norm = cmd->add_flag_callback(
      "--no-normalize", [&a] { a.normalize = false; },
      "skip the model's Normalize module (default: as modules.json says)");
  norm->excludes(no_norm);
  auto* prompt_name = cmd->add_option_function<std::string>(
      "--prompt-name", [&a](const std::string& s) { a.prompt_name = s; },
      "a prompt of config_sentence_transformers.json, prepended to every text");
  auto* prompt = cmd->add_option_function<std::string>(
      "--prompt", [&a](const std::string& s) { a.prompt = s; }, "a prompt prepended to every text");
  prompt->excludes(prompt_name);
  cmd->add_option("--batch-size", a.batch_size)->check(positive());
  cmd->add_option("--threads", a.threads, "worker threads (0: all cores)");
  cmd->add_option("text", a.texts, "texts to embed")->required();
  return cmd;
}

int run_embed(const EmbedArgs& a) {
  auto embedder = Embedder::load(a.model, {a.threads, Numerics::parse(a.dtype, a.mode)});
  EmbedOptions opt;
  opt.normalize = a.normalize;
  opt.prompt = a.prompt;
  opt.prompt_name = a.prompt_name;
  opt.batch_size = a.batch_size;
  const std::vector<float> vectors = embedder->encode(a.texts, opt);
  const int64_t dim = embedder->info().dimension;
  if (a.format == "json") {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < a.texts.size(); ++i) {
      rows.push_back(
          std::vector<float>(vectors.begin() + i * dim, vectors.begin() + (i + 1) * dim));
    }
    const Numerics& n = embedder->encoder_info().numerics;
    nlohmann::json out = {{"model", embedder->info().snapshot.string()},
                          {"dimension", dim},
                          {"dtype", n.dtype_name()},
                          {"mode", n.mode_name()},
                          {"embeddings", rows}};
    std::cout << out.dump() << "\n";
    return 0;
  }
  for (size_t i = 0; i < a.texts.size(); ++i) {
    for (int64_t j = 0; j < dim; ++j) {
      std::printf(j ? " %.9g" : "%.9g", static_cast<double>(vectors[i * dim + j]));
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace hubzoo::cli
