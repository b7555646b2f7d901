// `hubzoo rerank`: scores documents against a query with a cross-encoder or
// a decoder reranker (engine/reranker.h), best first.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/reranker.h"

namespace hubzoo::cli {

CLI::App* add_rerank_command(CLI::App& app, RerankArgs& a) {
  auto* cmd = app.add_subcommand(
      "rerank", "score documents against a query (CrossEncoder, Qwen3-Reranker), best first");
  cmd->add_option("-m,--model", a.model, "snapshot directory or repo id in the HF cache")
      ->required();
  cmd->add_option("--query,-q", a.query, "the query")->required();
  cmd->add_option("--format", a.format, "text: 'index<TAB>score<TAB>document' lines; json")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--dtype", a.dtype)->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--mode", a.mode)->check(CLI::IsMember({"eager", "fused"}));
  cmd->add_option("--max-length", a.max_length, "tokens of a pair (0: the model's)")
      ->check(non_negative());
  cmd->add_option("--top-n", a.top_n, "print the best N (0: all)")->check(non_negative());
  cmd->add_flag("--raw", a.raw, "logits before the activation");
  cmd->add_option_function<std::string>(
      "--instruction", [&a](const std::string& s) { a.instruction = s; },
      "decoder rerankers: the <Instruct> line");
  cmd->add_option("--threads", a.threads, "worker threads (0: all cores)");
  cmd->add_option("document", a.documents, "documents to rank")->required();
  return cmd;
}

int run_rerank(const RerankArgs& a) {
  RerankerOptions ro;
  ro.num_threads = a.threads;
  ro.numerics = Numerics::parse(a.dtype, a.mode);
  ro.max_length = a.max_length;
  auto reranker = Reranker::load(a.model, ro);
  RerankOptions opt;
  opt.raw = a.raw;
  opt.instruction = a.instruction;
  const std::vector<float> scores = reranker->score(a.query, a.documents, opt);
  const int64_t labels = reranker->info().num_labels;
  std::vector<float> first(a.documents.size());
  for (size_t i = 0; i < first.size(); ++i) first[i] = scores[i * labels];
  std::vector<int64_t> order = rank_order(first);
  if (a.top_n > 0 && static_cast<size_t>(a.top_n) < order.size()) order.resize(a.top_n);
  if (a.format == "json") {
    nlohmann::json results = nlohmann::json::array();
    for (const int64_t i : order) {
      results.push_back({{"index", i}, {"score", first[i]}, {"document", a.documents[i]}});
    }
    std::cout << nlohmann::json{{"model", reranker->info().snapshot.string()}, {"results", results}}
                     .dump()
              << "\n";
    return 0;
  }
  for (const int64_t i : order) {
    std::printf("%lld\t%.9g\t%s\n", static_cast<long long>(i), static_cast<double>(first[i]),
                a.documents[i].c_str());
  }
  return 0;
}

}  // namespace hubzoo::cli
