// Jinja parse + render, through ChatTemplate as a chat request uses it.
// Input: `<template>\0<json>` (fuzz_util.h); the JSON is the messages list,
// or an object {"messages": [...], "tools": [...], "documents": [...],
// "add_generation_prompt": bool}; absent or malformed JSON renders a fixed
// two-turn conversation. Render limits are tighter than the defaults (loop
// iterations, output size) so that each input runs in milliseconds; a
// template hitting them ends with a LimitError, which is a clean error.
// Anything but a hubzoo::Error is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "fuzz_util.h"
#include "tokenizer/chat_template.h"

namespace {

using Json = nlohmann::ordered_json;

const Json& default_messages() {
  static const Json m = Json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi <b>&</b>"},)"
      R"({"role":"assistant","content":"Hello!"},{"role":"user","content":"2+2?"}])");
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [source, json_text] = hubzoo::fuzz::split_at_nul(data, size);
  Json messages = default_messages();
  hubzoo::ChatTemplateOptions options;
  options.limits.max_loop_iterations = 10'000;
  options.limits.max_output_bytes = 1 << 20;
  options.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_array()) {
    messages = std::move(j);
  } else if (j.is_object()) {
    if (j.contains("messages")) messages = j["messages"];
    if (j.contains("tools")) options.tools = j["tools"];
    if (j.contains("documents")) options.documents = j["documents"];
    if (j.contains("add_generation_prompt") && j["add_generation_prompt"].is_boolean()) {
      options.add_generation_prompt = j["add_generation_prompt"].get<bool>();
    }
  }
  try {
    const auto tmpl =
        hubzoo::ChatTemplate::from_string(std::string(source), options.special_tokens);
    tmpl.render(messages, options);
  } catch (const hubzoo::Error&) {
  }
  return 0;
}
