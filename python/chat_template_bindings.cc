// hubzoo._hubzoo.render_chat_template*: JSON strings in, rendered text out.
// options_json: {"add_generation_prompt", "tools", "documents", "template_name",
// "bos_token", "eos_token", ... (special tokens), anything else = template kwargs}.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/json.h"
#include "tokenizer/chat_template.h"

namespace nb = nanobind;

namespace {

using ojson = nlohmann::ordered_json;

// Through io/json's bounded parser: depth and size limits as for files.
ojson parse(const std::string& text, const char* what) {
  try {
    return hubzoo::parse_ordered_json(text, what);
  } catch (const hubzoo::FormatError& e) {
    throw hubzoo::InvalidArgument(std::string(what) + " is not valid JSON: " + e.what());
  }
}

hubzoo::ChatTemplateOptions parse_options(const std::string& options_json) {
  ojson o = parse(options_json.empty() ? "{}" : options_json, "options_json");
  if (!o.is_object()) throw hubzoo::InvalidArgument("options_json must be a JSON object");
  static const char* kTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                  "pad_token", "cls_token", "mask_token"};
  hubzoo::ChatTemplateOptions opt;
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    bool is_token = false;
    for (const char* t : kTokens) is_token = is_token || k == t;
    if (k == "add_generation_prompt") {
      opt.add_generation_prompt = v.is_boolean() ? v.get<bool>() : !v.is_null();
    } else if (k == "tools") {
      opt.tools = v;
    } else if (k == "documents") {
      opt.documents = v;
    } else if (k == "template_name" && v.is_string()) {
      opt.template_name = v.get<std::string>();
    } else if (is_token && v.is_string()) {
      opt.special_tokens[k] = v.get<std::string>();
    } else {
      opt.extra_kwargs[k] = v;
    }
  }
  return opt;
}

}  // namespace

void bind_chat_template(nb::module_& m) {
  m.def(
      "render_chat_template",
      [](const std::string& source, const std::string& messages_json,
         const std::string& options_json) {
        auto tmpl = hubzoo::ChatTemplate::from_string(source);
        return tmpl.render(parse(messages_json, "messages_json"), parse_options(options_json));
      },
      nb::arg("template_source"), nb::arg("messages_json"), nb::arg("options_json") = "{}");
  m.def(
      "render_chat_template_from_snapshot",
      [](const std::string& dir, const std::string& messages_json,
         const std::string& options_json) {
        auto tmpl = hubzoo::ChatTemplate::from_snapshot(dir);
        return tmpl.render(parse(messages_json, "messages_json"), parse_options(options_json));
      },
      nb::arg("dir"), nb::arg("messages_json"), nb::arg("options_json") = "{}");
}
