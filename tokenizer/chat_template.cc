#include "tokenizer/chat_template.h"

#include "io/gguf.h"
#include "tokenizer/gguf_tokenizer.h"

#include "base/error.h"
#include "io/json.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// A special token in tokenizer_config.json: a string or an AddedToken dict.
bool token_content(const ojson& v, std::string& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
    return true;
  }
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    out = v["content"].get<std::string>();
    return true;
  }
  return false;
}

const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                "pad_token", "cls_token", "mask_token"};

// apply_chat_template's input clean-up: drop null-valued keys, then alias
// reasoning as {"thinking": r, **message, "reasoning_content": r}.
ojson prepare_message(const ojson& message) {
  ojson m = ojson::object();
  for (auto it = message.begin(); it != message.end(); ++it) {
    if (!it.value().is_null()) m[it.key()] = it.value();
  }
  const ojson* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    if (m.contains(key) && !m[key].is_null()) {
      reasoning = &m[key];
      break;
    }
  }
  if (!reasoning) return m;
  ojson r = *reasoning;
  ojson out = ojson::object();
  out["thinking"] = r;
  for (auto it = m.begin(); it != m.end(); ++it) out[it.key()] = it.value();
  out["reasoning_content"] = r;
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::from_string(const std::string& source,
                                       std::map<std::string, std::string> special_tokens) {
  ChatTemplate t;
  t.sources_["default"] = source;
  t.compiled_["default"] = std::make_shared<const jinja::Template>(source);
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

ChatTemplate ChatTemplate::from_gguf_metadata(const ojson& metadata, const std::string& where) {
  ChatTemplate t;
  const ojson config = gguf_tokenizer_config(metadata);
  for (const char* key : kSpecialTokens) {
    std::string v;
    if (config.contains(key) && token_content(config[key], v)) t.special_tokens_[key] = v;
  }
  if (config.contains("chat_template") && config["chat_template"].is_string())
    t.sources_["default"] = config["chat_template"].get<std::string>();
  if (t.sources_.empty()) throw FileError("no chat template in " + where);
  t.compile_sources(where);
  return t;
}

ChatTemplate ChatTemplate::from_snapshot(const fs::path& dir) {
  std::error_code ec;
  if (dir.extension() == ".gguf" && fs::is_regular_file(dir, ec)) {
    return from_gguf_metadata(GgufFile::open(dir)->metadata(), dir.string());
  }
  ChatTemplate t;
  ojson config = ojson::object();
  if (fs::exists(dir / "tokenizer_config.json"))
    config = read_ordered_json_file(dir / "tokenizer_config.json");
  // Legacy special_tokens_map.json first; tokenizer_config.json's entries win.
  if (fs::exists(dir / "special_tokens_map.json")) {
    ojson legacy = read_ordered_json_file(dir / "special_tokens_map.json");
    for (const char* key : kSpecialTokens) {
      std::string v;
      if (legacy.contains(key) && token_content(legacy[key], v)) t.special_tokens_[key] = v;
    }
  }
  for (const char* key : kSpecialTokens) {
    std::string v;
    if (config.contains(key) && token_content(config[key], v)) t.special_tokens_[key] = v;
  }
  // Separate template files take priority over tokenizer_config.json entries.
  if (fs::exists(dir / "chat_template.jinja")) {
    t.sources_["default"] = read_text_file(dir / "chat_template.jinja");
  }
  const fs::path extra = dir / "additional_chat_templates";
  if (fs::is_directory(extra)) {
    for (const auto& e : fs::directory_iterator(extra)) {
      if (e.path().extension() == ".jinja")
        t.sources_[e.path().stem().string()] = read_text_file(e.path());
    }
  }
  if (t.sources_.empty() && config.contains("chat_template")) {
    const ojson& ct = config["chat_template"];
    if (ct.is_string()) {
      t.sources_["default"] = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const auto& entry : ct) {
        if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
            !entry["name"].is_string() || !entry["template"].is_string()) {
          throw FormatError((dir / "tokenizer_config.json").string() +
                            ": chat_template list entries need string 'name' and 'template'");
        }
        t.sources_[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
      }
    } else if (!ct.is_null()) {
      throw FormatError((dir / "tokenizer_config.json").string() +
                        ": chat_template must be a string or a list");
    }
  }
  if (t.sources_.empty()) throw FileError("no chat template in " + dir.string());
  t.compile_sources(dir.string());
  return t;
}

void ChatTemplate::compile_sources(const std::string& where) {
  for (const auto& [name, src] : sources_) {
    try {
      compiled_[name] = std::make_shared<const jinja::Template>(src);
    } catch (const FormatError& e) {
      throw FormatError(where + ": chat template '" + name + "': " + e.what());
    }
  }
}

namespace {

// jinja::from_json and copies recurse once per level: values nested deeper
// than JSON files may be (JsonLimits' default) are refused before either.
constexpr size_t kMaxChatJsonDepth = JsonLimits{}.max_depth;

template <typename Json>
void check_depth(const Json& v, const char* what) {
  if (json_depth(v, kMaxChatJsonDepth) > kMaxChatJsonDepth) {
    throw InvalidArgument(std::string(what) + " nested deeper than the limit of " +
                          std::to_string(kMaxChatJsonDepth) + " levels");
  }
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::json& messages,
                                 const ChatTemplateOptions& options) const {
  check_depth(messages, "chat messages");
  return render(ojson(messages), options);
}

std::string ChatTemplate::render(const ojson& messages, const ChatTemplateOptions& options) const {
  std::string name = options.template_name;
  if (name.empty()) {
    if (compiled_.size() == 1 && compiled_.count("default")) {
      name = "default";
    } else if (!options.tools.is_null() && compiled_.count("tool_use")) {
      name = "tool_use";
    } else if (compiled_.count("default")) {
      name = "default";
    } else {
      throw InvalidArgument("this model has several chat templates and none named 'default'");
    }
  }
  auto it = compiled_.find(name);
  if (it == compiled_.end()) throw InvalidArgument("no chat template named '" + name + "'");

  check_depth(messages, "chat messages");
  check_depth(options.tools, "tools");
  check_depth(options.documents, "documents");
  check_depth(options.extra_kwargs, "extra template kwargs");
  if (!messages.is_array())
    throw InvalidArgument("chat messages must be a list of message objects");
  if (messages.empty()) {
    throw InvalidArgument("cannot apply a chat template to an empty conversation");
  }
  ojson chat = ojson::array();
  for (const auto& m : messages) {
    if (!m.is_object())
      throw InvalidArgument("chat messages must be objects, got " + json_excerpt(m));
    chat.push_back(prepare_message(m));
  }
  if (!options.documents.is_null()) {
    if (!options.documents.is_array()) throw InvalidArgument("documents must be a list of objects");
    for (const auto& d : options.documents) {
      if (!d.is_object())
        throw InvalidArgument("documents should be a list of dicts with 'title' and 'text' keys");
    }
  }
  if (!options.extra_kwargs.is_null() && !options.extra_kwargs.is_object()) {
    throw InvalidArgument("extra template kwargs must be an object");
  }

  jinja::Value ctx = jinja::Value::make_dict();
  auto set = [&](const std::string& key, jinja::Value v) {
    ctx.dict->set(jinja::Value::string(key), std::move(v));
  };
  set("messages", jinja::from_json(chat));
  set("tools", jinja::from_json(options.tools));
  set("documents", jinja::from_json(options.documents));
  set("add_generation_prompt", jinja::Value::boolean(options.add_generation_prompt));
  std::map<std::string, std::string> tokens = special_tokens_;
  for (const auto& [k, v] : options.special_tokens) tokens[k] = v;
  for (const auto& [k, v] : tokens) set(k, jinja::Value::string(v));
  if (options.extra_kwargs.is_object()) {
    for (auto kv = options.extra_kwargs.begin(); kv != options.extra_kwargs.end(); ++kv) {
      const std::string& k = kv.key();
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt") {
        throw InvalidArgument("template keyword argument '" + k + "' given twice");
      }
      set(k, jinja::from_json(kv.value()));
    }
  }
  return it->second->render(ctx, options.limits);
}

}  // namespace hubzoo
