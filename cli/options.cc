// Options every model-loading subcommand shares.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"

namespace hubzoo::cli {

void add_load_options(CLI::App* cmd, std::string& gguf_file, std::string& quantize) {
  cmd->add_option("--gguf-file", gguf_file,
                  "one .gguf file of the snapshot folder or repo to load (as gguf_file=)");
  cmd->add_option(
      "--quantize", quantize,
      "quantize fp32/bf16/f16 weights on load to a GGUF block type (q8_0, q4_0, q4_k, "
      "q5_k, q6_k, ...) or llama-quantize's mix q4_k_m / q5_k_m; 'dequantize': a quantized "
      "checkpoint's matrices dense in the dtype, as transformers loads a GGUF");
}

LoadOptions load_options(int threads, const std::string& dtype, const std::string& mode,
                         const std::string& quantize, const std::string& gguf_file) {
  return LoadOptions::parse(threads, dtype, mode, quantize, gguf_file);
}

namespace {
// A number option's check: `ok` on the parsed value, else a message saying
// what the option wants (CLI11's own PositiveNumber printed its range up to
// DBL_MAX as a 300-digit number, and said 0 was "not in range 0 to ...").
CLI::Validator number_check(bool (*ok)(double), const char* wanted) {
  return CLI::Validator(
      [ok, wanted](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
        return ok(v) ? std::string() : std::string("must be ") + wanted + ", got " + text;
      },
      wanted, wanted);
}
}  // namespace

const CLI::Validator& positive() {
  static const CLI::Validator check = number_check([](double v) { return v > 0; }, "positive");
  return check;
}

const CLI::Validator& non_negative() {
  static const CLI::Validator check = number_check([](double v) { return v >= 0; }, "zero or more");
  return check;
}

void note_ignored_modules(const ModelInfo& info) {
  for (const auto& [prefix, reason] : info.ignored_modules) {
    std::fprintf(stderr, "hubzoo: not loaded: %s* (%s)\n", prefix.c_str(), reason.c_str());
  }
}

}  // namespace hubzoo::cli
