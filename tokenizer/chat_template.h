// Chat templates as transformers renders them: tokenizer.apply_chat_template
// with tokenize=False. The template source comes from a snapshot
// (chat_template.jinja, additional_chat_templates/*.jinja, or tokenizer_config.json's
// "chat_template", a string or a list of {name, template}) or from a string.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "jinja/eval.h"

namespace hubzoo {

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;      // a list of JSON schemas; null = absent (None)
  nlohmann::ordered_json documents;  // a list of {title, text}; null = absent (None)
  // More template variables, e.g. {"enable_thinking": false}; they override
  // special tokens of the same name, as transformers' **kwargs do.
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();
  // bos_token, eos_token, unk_token, ...: added to (and overriding) the
  // snapshot's special tokens map, which transformers passes to every template.
  std::map<std::string, std::string> special_tokens;
  // A template name when the snapshot has several; empty = transformers' choice
  // ("tool_use" when tools are given and it exists, else "default").
  std::string template_name;
  jinja::RenderLimits limits;
};

class ChatTemplate {
 public:
  // Throws FileError if the snapshot has no chat template, FormatError if it is malformed.
  static ChatTemplate from_snapshot(const std::filesystem::path& dir);
  // A GGUF file's tokenizer.chat_template and special tokens, from its parsed
  // metadata (io/gguf.h); `where` names the file in errors.
  static ChatTemplate from_gguf_metadata(const nlohmann::ordered_json& metadata,
                                         const std::string& where);
  // `special_tokens` as transformers' tokenizer.special_tokens_map.
  static ChatTemplate from_string(const std::string& source,
                                  std::map<std::string, std::string> special_tokens = {});

  // `messages`: a JSON list of message objects. Keys whose value is null are
  // dropped and reasoning fields aliased, as apply_chat_template does.
  // Throws InvalidArgument for a malformed conversation, jinja::TemplateError
  // (a hubzoo::Error) when the template raises or fails.
  std::string render(const nlohmann::ordered_json& messages,
                     const ChatTemplateOptions& options = {}) const;
  std::string render(const nlohmann::json& messages, const ChatTemplateOptions& options = {}) const;

  const std::map<std::string, std::string>& special_tokens() const { return special_tokens_; }
  // Template sources by name ("default" for a single template).
  const std::map<std::string, std::string>& sources() const { return sources_; }

 private:
  void compile_sources(const std::string& where);  // sources_ -> compiled_
  std::map<std::string, std::string> sources_;
  std::map<std::string, std::shared_ptr<const jinja::Template>> compiled_;
  std::map<std::string, std::string> special_tokens_;
};

}  // namespace hubzoo
