// POST /v1/embeddings over the Embedder (sentence-transformers' pipeline),
// when the server was started with --embedding-model.
#include <cstring>

#include "server/server_impl.h"

namespace hubzoo::server {
namespace {

std::string base64(const unsigned char* data, size_t n) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b =
        (data[i] << 16) | (i + 1 < n ? data[i + 1] << 8 : 0) | (i + 2 < n ? data[i + 2] : 0);
    out += table[(b >> 18) & 63];
    out += table[(b >> 12) & 63];
    out += i + 1 < n ? table[(b >> 6) & 63] : '=';
    out += i + 2 < n ? table[b & 63] : '=';
  }
  return out;
}

}  // namespace

void Server::Impl::handle_embeddings(const net::Request& req, net::Response& res) {
  if (!embedder) {
    throw ApiError(404, "invalid_request_error",
                   "No embedding model is loaded: start the server with --embedding-model.",
                   "model", "model_not_found");
  }
  const Json body = parse_body(req.body);
  check_model(get_string(body, "model").value_or(""), /*embedding=*/true);
  const std::vector<std::string> texts = embedding_inputs(body);
  const std::string format = get_string(body, "encoding_format").value_or("float");
  if (format != "float" && format != "base64") {
    throw bad_request("'encoding_format' must be 'float' or 'base64'.", "encoding_format");
  }
  const int64_t dim = embedder->info().dimension;
  if (const auto d = get_int(body, "dimensions"); d && *d != dim) {
    throw bad_request("This model's embeddings have " + std::to_string(dim) + " dimensions.",
                      "dimensions");
  }
  std::vector<float> vectors;
  int64_t tokens = 0;
  {
    std::lock_guard lock(embed_mu);
    for (const auto& t : texts) tokens += static_cast<int64_t>(embedder->tokenize(t).ids.size());
    vectors = embedder->encode(texts);
  }
  Json data = Json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    const float* v = &vectors[i * dim];
    Json e = {{"object", "embedding"}, {"index", i}};
    if (format == "base64") {
      e["embedding"] = base64(reinterpret_cast<const unsigned char*>(v), dim * sizeof(float));
    } else {
      e["embedding"] = std::vector<float>(v, v + dim);
    }
    data.push_back(e);
  }
  send_json(res, Json{{"object", "list"},
                      {"data", data},
                      {"model", embedding_id},
                      {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
}

}  // namespace hubzoo::server
