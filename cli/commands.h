// Subcommands of the `hubzoo` CLI that live in their own files.
#pragma once

#include <cstdint>
#include <string>

namespace hubzoo::cli {

struct ChatArgs {
  std::string model, message, system, dtype = "float32", mode = "fused";
  int64_t max_new_tokens = 512;
  float temperature = 0.0f, top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  bool stats = false;
};

// One shot with a message, else a read-reply loop on stdin until EOF or /exit.
int run_chat(const ChatArgs& args);

}  // namespace hubzoo::cli
