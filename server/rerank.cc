// POST /v1/rerank (the Cohere/Jina shape vLLM and llama.cpp serve) and POST
// /rerank (TEI's shape) over the Reranker, when the server was started with
// --rerank-model. Both check the request's shape before any tokenizing.
#include <algorithm>

#include "server/server_impl.h"

namespace hubzoo::server {
namespace {

constexpr size_t kMaxRerankDocuments = 1024;  // documents of one request

// `key` of body: a non-empty array of at most kMaxRerankDocuments strings.
std::vector<std::string> document_list(const Json& body, const char* key) {
  const std::string shape = std::string("'") + key + "' must be a non-empty array of strings.";
  if (!body.contains(key) || body[key].is_null()) {
    throw bad_request(std::string("'") + key + "' is required.", key);
  }
  const Json& docs = body[key];
  if (!docs.is_array()) throw bad_request(shape, key);
  if (docs.empty()) throw bad_request(std::string("'") + key + "' holds no documents.", key);
  if (docs.size() > kMaxRerankDocuments) {
    throw bad_request(std::string("'") + key + "' may hold at most " +
                          std::to_string(kMaxRerankDocuments) + " documents, got " +
                          std::to_string(docs.size()) + ".",
                      key);
  }
  std::vector<std::string> out;
  out.reserve(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    if (!docs[i].is_string()) {
      throw bad_request(std::string("'") + key + "[" + std::to_string(i) + "]' is not a string.",
                        key);
    }
    out.push_back(docs[i].get<std::string>());
  }
  return out;
}

std::string query_of(const Json& body) {
  const auto q = get_string(body, "query");
  if (!q) throw bad_request("'query' is required and must be a string.", "query");
  return *q;
}

}  // namespace

void Server::Impl::handle_rerank(const net::Request& req, net::Response& res) {
  if (!reranker) {
    throw ApiError(404, "invalid_request_error",
                   "No rerank model is loaded: start the server with --rerank-model.", "model",
                   "model_not_found");
  }
  const Json body = parse_body(req.body);
  const std::string model = get_string(body, "model").value_or("");
  if (!model.empty() && model != rerank_id) {
    throw ApiError(404, "invalid_request_error",
                   "The model '" + model + "' does not exist; this server serves '" + rerank_id +
                       "' for reranking.",
                   "model", "model_not_found");
  }
  const std::string query = query_of(body);
  const std::vector<std::string> docs = document_list(body, "documents");
  int64_t top_n = static_cast<int64_t>(docs.size());
  if (const auto t = get_int(body, "top_n")) {
    if (*t < 1 || *t > static_cast<int64_t>(kMaxRerankDocuments)) {
      throw bad_request("'top_n' must be between 1 and " + std::to_string(kMaxRerankDocuments) +
                            ", got " + std::to_string(*t) + ".",
                        "top_n");
    }
    top_n = std::min(*t, top_n);  // more than the documents: all of them (vLLM, llama.cpp)
  }
  const bool return_documents = get_bool(body, "return_documents").value_or(false);
  std::vector<float> scores;
  int64_t tokens = 0;
  {
    std::lock_guard lock(rerank_mu);
    for (const auto& d : docs)
      tokens += static_cast<int64_t>(reranker->tokenize(query, d).ids.size());
    scores = reranker->score(query, docs);
  }
  const int64_t labels = reranker->info().num_labels;
  std::vector<float> first(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) first[i] = scores[i * labels];
  const std::vector<int64_t> order = rank_order(first);
  Json results = Json::array();
  for (int64_t k = 0; k < top_n; ++k) {
    const int64_t i = order[k];
    Json r = {{"index", i}, {"relevance_score", first[i]}};
    if (return_documents) r["document"] = {{"text", docs[i]}};
    results.push_back(r);
  }
  send_json(res, Json{{"id", new_id("rerank-")},
                      {"model", rerank_id},
                      {"results", results},
                      {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
}

void Server::Impl::handle_tei_rerank(const net::Request& req, net::Response& res) {
  if (!reranker) {
    throw ApiError(404, "invalid_request_error",
                   "No rerank model is loaded: start the server with --rerank-model.", "model",
                   "model_not_found");
  }
  const Json body = parse_body(req.body);
  const std::string query = query_of(body);
  const std::vector<std::string> texts = document_list(body, "texts");
  RerankOptions o;
  o.raw = get_bool(body, "raw_scores").value_or(false);
  const bool return_text = get_bool(body, "return_text").value_or(false);
  // TEI: without truncate, a pair longer than the model takes is an error.
  const bool truncate = get_bool(body, "truncate").value_or(false);
  std::vector<float> scores;
  {
    std::lock_guard lock(rerank_mu);
    const int64_t limit = reranker->info().max_length;
    for (size_t i = 0; !truncate && i < texts.size(); ++i) {
      const int64_t n = reranker->full_length(query, texts[i]);
      if (n > limit) {
        throw bad_request("'texts[" + std::to_string(i) + "]' with the query is " +
                              std::to_string(n) + " tokens, over the model's " +
                              std::to_string(limit) + "; set 'truncate' to true to truncate.",
                          "texts");
      }
    }
    scores = reranker->score(query, texts, o);
  }
  const int64_t labels = reranker->info().num_labels;
  std::vector<float> first(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) first[i] = scores[i * labels];
  Json out = Json::array();
  for (const int64_t i : rank_order(first)) {
    Json r = {{"index", i}, {"score", first[i]}};
    if (return_text) r["text"] = texts[i];
    out.push_back(r);
  }
  send_json(res, out);
}

}  // namespace hubzoo::server
