#include "hub/repo_files.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "hub/http.h"

namespace hubzoo {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string_view basename(std::string_view p) {
  const size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

bool is_lower_hex(std::string_view s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// A sentence-transformers module folder: "1_Pooling", "2_Dense", ...
bool is_st_module_dir(std::string_view dir) {
  const size_t us = dir.find('_');
  return us != std::string_view::npos && us > 0 && us + 1 < dir.size() &&
         std::all_of(dir.begin(), dir.begin() + static_cast<long>(us),
                     [](char c) { return c >= '0' && c <= '9'; });
}

bool is_tokenizer_or_config(std::string_view name) {
  static const char* const kNames[] = {"config.json",
                                       "generation_config.json",
                                       "tokenizer.json",
                                       "tokenizer_config.json",
                                       "special_tokens_map.json",
                                       "added_tokens.json",
                                       "tokenizer.model",
                                       "spiece.model",
                                       "sentencepiece.bpe.model",
                                       "vocab.json",
                                       "vocab.txt",
                                       "merges.txt",
                                       "chat_template.jinja",
                                       "chat_template.json",
                                       "modules.json",
                                       "config_sentence_transformers.json",
                                       "sentence_bert_config.json"};
  return std::any_of(std::begin(kNames), std::end(kNames),
                     [&](const char* n) { return name == n; });
}

bool wanted_by_default(std::string_view path) {
  const std::string_view name = basename(path);
  const bool weights =
      ends_with(name, ".safetensors") || ends_with(name, ".safetensors.index.json");
  const size_t slash = path.find('/');
  if (slash == std::string_view::npos) return weights || is_tokenizer_or_config(name);
  const std::string_view dir = path.substr(0, slash);
  if (dir == "additional_chat_templates") return ends_with(name, ".jinja");
  // sentence-transformers modules: N_Name/config.json, N_Name/model.safetensors, ...
  if (is_st_module_dir(dir) && path.find('/', slash + 1) == std::string_view::npos) {
    return weights || ends_with(name, ".json") || is_tokenizer_or_config(name);
  }
  return false;
}

bool glob_at(std::string_view p, std::string_view s) {
  // Iterative with one backtrack point for '*': linear in practice, no recursion.
  size_t pi = 0, si = 0, star = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      star_s = si;
      continue;
    }
    if (pi < p.size() && p[pi] == '[') {
      size_t j = pi + 1;
      const bool negate = j < p.size() && (p[j] == '!');
      if (negate) ++j;
      bool matched = false;
      const size_t first = j;
      while (j < p.size() && (p[j] != ']' || j == first)) {
        if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
          matched |= p[j] <= s[si] && s[si] <= p[j + 2];
          j += 3;
        } else {
          matched |= p[j] == s[si];
          ++j;
        }
      }
      if (j < p.size() && matched != negate) {
        pi = j + 1;
        ++si;
        continue;
      }
      if (j >= p.size() && s[si] == '[') {  // no closing ']': a literal '['
        ++pi;
        ++si;
        continue;
      }
    } else if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
      continue;
    }
    if (star == std::string_view::npos) return false;
    pi = star + 1;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

[[noreturn]] void bad_info(const std::string& why) {
  throw DownloadError("the Hub's model info answer is invalid: " + why);
}

}  // namespace

bool is_commit_hash(std::string_view s) { return is_lower_hex(s, 40); }
bool is_sha256_hex(std::string_view s) { return is_lower_hex(s, 64); }

bool is_safe_repo_path(std::string_view path) {
  if (path.empty() || path.size() > 1024 || path.front() == '/' || path.back() == '/') {
    return false;
  }
  for (const char c : path) {
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

bool is_safe_etag(std::string_view etag) {
  if (etag.empty() || etag.size() > 128 || etag == "." || etag == "..") return false;
  return std::all_of(etag.begin(), etag.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::string normalize_etag(std::string_view etag) {
  if (etag.rfind("W/", 0) == 0) etag.remove_prefix(2);
  while (!etag.empty() && etag.front() == '"') etag.remove_prefix(1);
  while (!etag.empty() && etag.back() == '"') etag.remove_suffix(1);
  return std::string(etag);
}

bool glob_match(std::string_view pattern, std::string_view name) {
  if (!pattern.empty() && pattern.back() == '/') {
    return name.substr(0, pattern.size()) == pattern && name.size() > pattern.size();
  }
  return glob_at(pattern, name);
}

RepoInfo parse_repo_info(std::string_view json) {
  if (json.size() > kMaxRepoInfoBytes)
    bad_info("over " + std::to_string(kMaxRepoInfoBytes) + " bytes");
  // The parser's depth is bounded by the input size we just bounded; no
  // recursion in our own walk below.
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) bad_info("not a JSON object");
  RepoInfo info;
  auto sha = j.find("sha");
  if (sha == j.end() || !sha->is_string() || !is_commit_hash(sha->get<std::string>())) {
    bad_info("\"sha\" is not a 40-hex commit");
  }
  info.commit = sha->get<std::string>();
  auto siblings = j.find("siblings");
  if (siblings == j.end() || !siblings->is_array()) bad_info("no \"siblings\" array");
  if (siblings->size() > kMaxRepoFiles) {
    bad_info(std::to_string(siblings->size()) + " files (more than " +
             std::to_string(kMaxRepoFiles) + ")");
  }
  for (const auto& s : *siblings) {
    auto name = s.is_object() ? s.find("rfilename") : s.end();
    if (!s.is_object() || name == s.end() || !name->is_string()) {
      bad_info("a sibling without a string \"rfilename\"");
    }
    const std::string& f = name->get_ref<const std::string&>();
    if (!is_safe_repo_path(f)) {
      std::string shown = f.substr(0, 200);  // control characters shown as '?'
      for (char& ch : shown) {
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
      }
      bad_info("file name '" + shown + "' would leave the snapshot folder");
    }
    info.files.push_back(f);
  }
  return info;
}

std::vector<std::string> select_files(const std::vector<std::string>& files,
                                      const FileSelection& sel) {
  auto any = [](const std::vector<std::string>& globs, const std::string& f) {
    return std::any_of(globs.begin(), globs.end(),
                       [&](const std::string& g) { return glob_match(g, f); });
  };
  if (!sel.gguf_file.empty() &&
      std::find(files.begin(), files.end(), sel.gguf_file) == files.end()) {
    throw DownloadError("--gguf-file '" + sel.gguf_file + "' is not in the repo");
  }
  std::vector<std::string> ggufs;
  bool safetensors = false;
  for (const std::string& f : files) {
    if (ends_with(f, ".gguf")) ggufs.push_back(f);
    safetensors |= ends_with(f, ".safetensors");
  }
  if (sel.gguf_file.empty() && !ggufs.empty() && !safetensors && sel.include.empty()) {
    std::string names;
    for (size_t i = 0; i < ggufs.size() && i < 20; ++i) names += (i ? ", " : "") + ggufs[i];
    throw DownloadError("the repo holds GGUF files only: name one with --gguf-file (gguf_file=): " +
                        names);
  }
  std::vector<std::string> out;
  for (const std::string& f : files) {
    const bool base = sel.gguf_file.empty() ? wanted_by_default(f) : f == sel.gguf_file;
    if ((base || any(sel.include, f)) && !any(sel.exclude, f)) out.push_back(f);
  }
  return out;
}

}  // namespace hubzoo
