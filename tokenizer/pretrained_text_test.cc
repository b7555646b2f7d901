// load_pretrained_text: the tokenizer and chat template it reads together equal
// those read apart, from a GGUF file and from a snapshot folder; a missing
// chat template is kept as the error from_snapshot throws, the tokenizer still read.
#include "tokenizer/pretrained_text.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/error.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;

const fs::path kRepo = fs::path(__FILE__).parent_path().parent_path();

void expect_same_as_apart(const fs::path& source) {
  SCOPED_TRACE(source.string());
  const PretrainedText text = load_pretrained_text(source);
  EXPECT_EQ(text.source, source);
  const Tokenizer apart = Tokenizer::from_pretrained(source);
  for (const std::string s : {"Hello, world! \xF0\x9F\x91\x8D", "<|im_start|>user\nHi<|im_end|>"}) {
    EXPECT_EQ(text.tokenizer.encode(s).ids, apart.encode(s).ids);
  }
  ASSERT_TRUE(text.chat_template.has_value());
  EXPECT_FALSE(text.chat_template_error);
  const ChatTemplate t = ChatTemplate::from_snapshot(source);
  EXPECT_EQ(text.chat_template->sources(), t.sources());
  EXPECT_EQ(text.chat_template->special_tokens(), t.special_tokens());
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(text.chat_template->render(messages), t.render(messages));
}

TEST(TokenizerSmolLM2, PretrainedTextEqualsTheTokenizerAndTemplateReadApart) {
  expect_same_as_apart(kRepo / "models" / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf");
  expect_same_as_apart(kRepo / "models" / "SmolLM2-135M-Instruct");
}

TEST(TokenizerSmolLM2, PretrainedTextWithoutAChatTemplateKeepsItsError) {
  const fs::path dir = fs::temp_directory_path() / ("hubzoo_text_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kRepo / "models" / "SmolLM2-135M-Instruct" / "tokenizer.json",
                dir / "tokenizer.json");
  const PretrainedText text = load_pretrained_text(dir);
  EXPECT_EQ(text.tokenizer.encode("Hi").ids, (std::vector<int64_t>{26843}));
  EXPECT_FALSE(text.chat_template.has_value());
  ASSERT_TRUE(text.chat_template_error);
  EXPECT_THROW(std::rethrow_exception(text.chat_template_error), FileError);
  // No tokenizer is the tokenizer's error, thrown.
  fs::remove(dir / "tokenizer.json");
  EXPECT_THROW(load_pretrained_text(dir), FileError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hubzoo
