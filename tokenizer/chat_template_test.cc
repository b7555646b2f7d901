#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/test_util.h"
#include "jinja/sandbox.h"

namespace hubzoo {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

const char* kChatML =
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' "
    "}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(ChatTemplate, RendersChatML) {
  auto t = ChatTemplate::from_string(kChatML);
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(t.render(msgs), "<|im_start|>user\nhi<|im_end|>\n");
  ChatTemplateOptions opt;
  opt.add_generation_prompt = true;
  EXPECT_EQ(t.render(msgs, opt), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, ContextAsTransformers) {
  auto t = ChatTemplate::from_string(
      "{{ bos_token }}|{{ tools is none }}|{{ documents is none }}|{{ enable_thinking }}|"
      "{{ messages[0] | tojson }}",
      {{"bos_token", "<s>"}});
  ChatTemplateOptions opt;
  opt.extra_kwargs = {{"enable_thinking", false}};
  // Null-valued keys are dropped; reasoning is aliased to `thinking` first.
  ojson msgs = ojson::parse(R"([{"role": "assistant", "content": null, "reasoning": "r"}])");
  EXPECT_EQ(
      t.render(msgs, opt),
      "<s>|True|True|False|{\"thinking\": \"r\", \"role\": \"assistant\", \"reasoning\": \"r\", "
      "\"reasoning_content\": \"r\"}");
  opt.special_tokens["bos_token"] = "<B>";
  opt.tools = ojson::array({{{"name", "f"}}});
  EXPECT_EQ(t.render(msgs, opt).substr(0, 10), "<B>|False|");
}

TEST(ChatTemplate, BadConversations) {
  auto t = ChatTemplate::from_string(kChatML);
  EXPECT_THROW(t.render(ojson::array()), InvalidArgument);
  EXPECT_THROW(t.render(ojson::parse(R"(["text"])")), InvalidArgument);
  EXPECT_THROW(t.render(ojson::parse(R"({"role": "user"})")), InvalidArgument);
  // content missing: the template's own concatenation fails, as in jinja2.
  EXPECT_THROW(t.render(ojson::parse(R"([{"role": "user"}])")), jinja::TemplateError);
}

// jinja::from_json recursed once per level: 100k nested arrays in a message
// or a tool crashed the renderer. Refused by depth before conversion.
TEST(ChatTemplate, DeepValuesAreRefused) {
  auto t = ChatTemplate::from_string(kChatML);
  // Built by moves: a copy would itself recurse 100k levels.
  auto deep = [] {
    ojson v = "x";
    for (int i = 0; i < 100000; ++i) {
      ojson a = ojson::array();
      a.push_back(std::move(v));
      v = std::move(a);
    }
    return v;
  };
  ojson msgs = ojson::array({ojson{{"role", "user"}, {"content", "hi"}}});
  ChatTemplateOptions opt;
  opt.tools = ojson::array();
  opt.tools.push_back(deep());
  test_util::expect_error<InvalidArgument>([&] { t.render(msgs, opt); },
                                           {"tools nested deeper than the limit of 128"});
  msgs[0]["content"] = deep();
  test_util::expect_error<InvalidArgument>([&] { t.render(msgs); }, {"chat messages nested"});
  nlohmann::json plain = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) {
    nlohmann::json a = nlohmann::json::array();
    a.push_back(std::move(plain));
    plain = std::move(a);
  }
  EXPECT_THROW(t.render(plain), InvalidArgument);
}

TEST(ChatTemplate, FromSnapshot) {
  fs::path dir = fs::temp_directory_path() / "hubzoo_chat_template_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer_config.json")
        << R"({"bos_token": {"content": "<B>"}, "eos_token": "<E>", "chat_template": "C{{ bos_token }}{{ eos_token }}"})";
  }
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(ChatTemplate::from_snapshot(dir).render(msgs), "C<B><E>");
  { std::ofstream(dir / "chat_template.jinja") << "F{{ messages | length }}\n"; }
  EXPECT_EQ(ChatTemplate::from_snapshot(dir).render(msgs), "F1");  // the file wins
  { std::ofstream(dir / "chat_template.jinja") << "{% if %}"; }
  EXPECT_THROW(ChatTemplate::from_snapshot(dir), FormatError);
  fs::remove_all(dir);
  EXPECT_THROW(ChatTemplate::from_snapshot(dir), FileError);
}

// Issue 15: a chat template from a model repo is untrusted. A macro-using
// template leaks nothing per request, a memory-hungry one stops at the
// budget, and the limits are the caller's to set.
TEST(ChatTemplate, HostileTemplatesAreBounded) {
  auto macro = ChatTemplate::from_string(
      "{% macro turn(m) %}<{{ m.role }}>{{ m.content }}{% endmacro %}"
      "{% set ns = namespace() %}{% set ns.self = ns %}"
      "{% for m in messages %}{{ turn(m) }}{% endfor %}");
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(macro.render(msgs), "<user>hi");
  const int64_t before = jinja::live_containers();
  for (int k = 0; k < 50; ++k) macro.render(msgs);
  EXPECT_EQ(jinja::live_containers(), before);

  auto hog = ChatTemplate::from_string(
      "{% set ns = namespace(s=messages[0].content) %}{% for i in range(64) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
  EXPECT_THROW(hog.render(msgs), jinja::LimitError);
  ChatTemplateOptions opt;
  opt.limits.max_value_bytes = 1 << 20;
  auto small = ChatTemplate::from_string("{{ (messages[0].content * 1000000) | length }}");
  EXPECT_EQ(small.render(msgs), "2000000");
  EXPECT_THROW(small.render(msgs, opt), jinja::LimitError);
}

}  // namespace
}  // namespace hubzoo
