// Uses an installed hubzoo through find_package(hubzoo): writes a tiny BPE
// tokenizer.json into argv[1], loads it with hubzoo::Tokenizer and checks the ids;
// a malformed file must raise the typed error. Exit 0 when all hold.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer <work dir>\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const std::filesystem::path file = dir / "tokenizer.json";
  std::ofstream(file)
      << R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})";
  const hubzoo::Tokenizer tok = hubzoo::Tokenizer::from_file(file);
  const std::vector<int64_t> ids = tok.encode("abab", false).ids;
  if (ids != std::vector<int64_t>{2, 2}) {
    std::fprintf(stderr, "unexpected ids for \"abab\"\n");
    return 1;
  }
  std::ofstream(dir / "bad.json") << "{";
  try {
    hubzoo::Tokenizer::from_file(dir / "bad.json");
    std::fprintf(stderr, "a malformed tokenizer.json was accepted\n");
    return 1;
  } catch (const hubzoo::Error& e) {
    std::printf("consumer: \"abab\" -> [2, 2]; malformed file -> %s\n", e.what());
  }
  return 0;
}
