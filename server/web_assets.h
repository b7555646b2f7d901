// The chat page's files (server/web/) and the Debian libraries it uses, embedded
// at build time by cmake/embed_files.cmake (the generated web_assets.cc), so
// `hubzoo serve` needs no network and no files beside its binary.
#pragma once

#include <span>
#include <string_view>

namespace hubzoo::server {

struct WebAsset {
  std::string_view path;          // served at: "/", "/assets/app.js", ...
  std::string_view content_type;  // from the file's extension
  std::string_view etag;          // quoted: the first 80 bits of the bytes' SHA-256, in hex
  std::string_view bytes;
};

// Every embedded file, in a fixed order (the page first).
std::span<const WebAsset> web_assets();

// Whether an If-None-Match value ("*", or a comma-separated list of entity tags,
// weak ones W/-prefixed) names `etag` (quoted): then the answer is 304.
bool etag_matches(std::string_view if_none_match, std::string_view etag);

}  // namespace hubzoo::server
