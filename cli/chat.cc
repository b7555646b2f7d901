// `hubzoo chat`: the model's own chat template renders the conversation, the
// tokenizer encodes it as transformers' apply_chat_template(tokenize=True)
// does (no special tokens added on top), and the answer streams as it decodes.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "cli/commands.h"
#include "engine/model_with_text.h"
#include "engine/scheduler.h"
#include "models/causal_lm.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hubzoo::cli {
namespace {

const char* kHelp =
    "commands: /reset forgets the conversation, /exit quits (so does end of input)\n";

class ChatSession {
 public:
  explicit ChatSession(const ChatArgs& a)
      : ChatSession(a, load_model_with_text(a.model, a.gguf_file, [&] {
                      return load_causal_lm(a.model, load_options(a.threads, a.dtype, a.mode,
                                                                  a.quantize, a.gguf_file));
                    })) {}

  void reset() {
    messages_ = nlohmann::ordered_json::array();
    if (!args_.system.empty()) messages_.push_back({{"role", "system"}, {"content", args_.system}});
  }

  // Streams the answer to stdout; the conversation keeps the turn only if it completed.
  void reply(const std::string& user) {
    nlohmann::ordered_json turn = messages_;
    turn.push_back({{"role", "user"}, {"content", user}});
    ChatTemplateOptions options;
    options.add_generation_prompt = true;
    const std::string prompt = template_.render(turn, options);
    const std::vector<int64_t> ids = tokenizer_.encode(prompt, /*add_special_tokens=*/false).ids;
    if (ids.empty()) throw InvalidArgument("the chat template rendered an empty prompt");
    const int64_t limit = model_->info().max_position_embeddings;
    if (limit > 0 && static_cast<int64_t>(ids.size()) >= limit) {
      throw InvalidArgument("the conversation is " + std::to_string(ids.size()) +
                            " tokens, the model's limit is " + std::to_string(limit) +
                            "; /reset to start over");
    }
    GenerationRequest request;
    request.prompt = ids;
    request.max_tokens = args_.max_new_tokens;  // the Scheduler caps it at the model's limit
    request.sampling = {args_.temperature, args_.top_k, args_.top_p, args_.seed + turns_};
    request.on_token = [](const TokenEvent& e) {
      std::fputs(e.text.c_str(), stdout);
      std::fflush(stdout);
    };
    const Completion c = run_one_to_completion(*model_, &tokenizer_, std::move(request));
    std::fputc('\n', stdout);
    std::fflush(stdout);
    // The answer without its stop token, decoded as transformers' decode(...,
    // skip_special_tokens=True) does: the streamed text, except that a character
    // cut off by max_new_tokens decodes (as U+FFFD) where the stream holds it back.
    std::vector<int64_t> answer = c.tokens;
    if (c.reason == FinishReason::kStop && !answer.empty()) answer.pop_back();
    turn.push_back({{"role", "assistant"}, {"content", tokenizer_.decode(answer, true)}});
    messages_ = std::move(turn);
    ++turns_;
    if (args_.stats) {
      const int64_t decode_steps = std::max<int64_t>(c.completion_tokens - 1, 0);
      std::fprintf(stderr, "[prompt %lld tokens, prefill %.3f s; %lld new tokens at %.2f tok/s]\n",
                   static_cast<long long>(c.prompt_tokens), c.first_token_seconds,
                   static_cast<long long>(c.completion_tokens),
                   decode_steps / std::max(c.total_seconds - c.first_token_seconds, 1e-9));
    }
  }

 private:
  ChatSession(const ChatArgs& a, ModelWithText loaded)
      : args_(a),
        model_(std::move(loaded.model)),
        tokenizer_(std::move(loaded.text.tokenizer)),
        template_(take_template(loaded.text)) {
    note_ignored_modules(model_->info());
    reset();
  }
  // The chat template, or the error reading it gave.
  static ChatTemplate take_template(PretrainedText& text) {
    if (!text.chat_template) std::rethrow_exception(text.chat_template_error);
    return std::move(*text.chat_template);
  }

  ChatArgs args_;
  std::unique_ptr<CausalLM> model_;
  Tokenizer tokenizer_;
  ChatTemplate template_;
  nlohmann::ordered_json messages_;
  uint64_t turns_ = 0;
};

}  // namespace

int run_chat(const ChatArgs& args) {
  ChatSession chat(args);
  if (!args.message.empty()) {
    chat.reply(args.message);
    return 0;
  }
  const bool tty = isatty(STDIN_FILENO);
  if (tty) std::fputs(kHelp, stderr);
  std::string line;
  while (true) {
    if (tty) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      chat.reset();
      continue;
    }
    if (line.empty()) continue;
    // A failed turn (e.g. too long for the model) is reported and forgotten;
    // the conversation so far is kept.
    try {
      chat.reply(line);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }
  return 0;
}

}  // namespace hubzoo::cli
