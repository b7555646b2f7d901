// load_model_with_text: the model and its text side load together; the model's
// error wins over the text side's, and the text side's own error still reaches
// the caller when the model loads.
#include "engine/model_with_text.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "base/error.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;

const fs::path kRepo = fs::path(__FILE__).parent_path().parent_path();
const fs::path kSmolLM2 = kRepo / "models" / "SmolLM2-135M-Instruct";

// A snapshot folder holding SmolLM2's config.json and weights, and `text_files` of its own.
fs::path partial_snapshot(const std::string& name, std::initializer_list<const char*> text_files) {
  const fs::path dir = fs::temp_directory_path() / ("hubzoo_" + name + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::create_symlink(fs::absolute(kSmolLM2 / f), dir / f);  // __FILE__ may be relative
  }
  for (const char* f : text_files) fs::copy_file(kSmolLM2 / f, dir / f);
  return dir;
}

std::function<std::unique_ptr<CausalLM>()> loader(const fs::path& dir) {
  return [dir] {
    return load_causal_lm(dir.string(), LoadOptions::parse(1, "float32", "fused", "", ""));
  };
}

TEST(ModelWithTextSmolLM2, LoadsTheModelAndItsText) {
  const fs::path dir = partial_snapshot("with_text_", {"tokenizer.json", "chat_template.jinja"});
  const ModelWithText m = load_model_with_text(dir.string(), "", loader(dir));
  ASSERT_TRUE(m.model);
  EXPECT_EQ(m.model->info().tokenizer_source(), dir);
  EXPECT_EQ(m.text.source, dir);
  EXPECT_EQ(m.text.tokenizer.encode("Hi").ids, (std::vector<int64_t>{26843}));
  ASSERT_TRUE(m.text.chat_template.has_value());  // chat_template.jinja
  fs::remove_all(dir);
}

TEST(ModelWithTextSmolLM2, TheModelsErrorWinsTheTextsErrorFollows) {
  const fs::path dir = partial_snapshot("no_text_", {});
  // Both fail: the model's error is the one thrown (the reader finishes first).
  EXPECT_THROW(load_model_with_text(
                   dir.string(), "",
                   []() -> std::unique_ptr<CausalLM> { throw ConfigError("the model's error"); }),
               ConfigError);
  // The model loads, the text side has no tokenizer.json: its error.
  try {
    load_model_with_text(dir.string(), "", loader(dir));
    ADD_FAILURE() << "no error";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hubzoo
