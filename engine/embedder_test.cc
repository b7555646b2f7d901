// The embedding pipeline on the real all-MiniLM-L6-v2 snapshot (models/), and
// broken copies of it: a text alone and in a batch gives the same bits; bad
// pipeline files fail with errors naming the file.
#include "engine/embedder.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "base/test_util.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;
using test_util::expect_error;
using test_util::TempDir;

const fs::path kMiniLM =
    fs::path(__FILE__).parent_path().parent_path() / "models" / "all-MiniLM-L6-v2";

class MiniLM : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kMiniLM / "config.json"))
        << kMiniLM << " missing: run scripts/prepare_models.py (scripts/test does)";
  }
};

EmbedOptions with_batch_size(int64_t n) {
  EmbedOptions o;
  o.batch_size = n;
  return o;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A copy of the snapshot: its files symlinked, no module folders.
void copy_snapshot(const fs::path& to) {
  for (const auto& f : fs::directory_iterator(kMiniLM)) {
    if (f.is_regular_file()) fs::create_symlink(fs::canonical(f.path()), to / f.path().filename());
  }
}

TEST_F(MiniLM, LoadsThePipeline) {
  auto e = Embedder::load(kMiniLM.string(), {2, {}});
  const EmbedderInfo& i = e->info();
  EXPECT_EQ(i.modules, (std::vector<std::string>{"Transformer", "Pooling", "Normalize"}));
  EXPECT_EQ(i.pooling.modes, std::vector<PoolingMode>{PoolingMode::kMean});
  EXPECT_EQ(i.max_seq_length, 256);
  EXPECT_EQ(i.dimension, 384);
  EXPECT_EQ(e->encoder_info().ignored_tensors.count("pooler.dense.weight"), 1u);
  // max_seq_length wins over tokenizer.json's own truncation (128).
  std::string long_text;
  for (int i = 0; i < 400; ++i) long_text += "word ";
  EXPECT_EQ(e->tokenize(long_text).ids.size(), 256u);
  EXPECT_TRUE(e->encode({}).empty());
}

TEST_F(MiniLM, BatchInvariant) {
  auto e = Embedder::load(kMiniLM.string(), {2, {}});
  const std::vector<std::string> texts = {
      "A sentence alone.", "", "Much longer text that goes on and on about nothing in particular.",
      "short"};
  const auto batch = e->encode(texts);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto alone = e->encode({texts[i]}, with_batch_size(1));
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batch.begin() + i * 384)) << texts[i];
  }
}

TEST_F(MiniLM, BadPipelines) {
  {
    TempDir d;
    copy_snapshot(d.path());
    expect_error<FileError>([&] { Embedder::load(d.path().string()); },
                            {"1_Pooling/config.json", "missing"});
    write(d / "1_Pooling/config.json", R"({"embedding_dimension": 384, "pooling_mode": "median"})");
    expect_error<ConfigError>([&] { Embedder::load(d.path().string()); },
                              {"1_Pooling/config.json", "median"});
    write(d / "1_Pooling/config.json", R"({"embedding_dimension": 100, "pooling_mode": "mean"})");
    expect_error<ConfigError>([&] { Embedder::load(d.path().string()); }, {"100", "384"});
  }
  {
    TempDir d;
    copy_snapshot(d.path());
    write(d / "1_Pooling/config.json", R"({"embedding_dimension": 384})");
    fs::remove(d / "modules.json");
    write(d / "modules.json",
          R"([{"path": "", "type": "sentence_transformers.models.Transformer"},
              {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
              {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])");
    write(d / "2_Dense/config.json", R"({"in_features": 384, "out_features": 8})");
    write(d / "2_Dense/pytorch_model.bin", "not a safetensors file");
    expect_error<FileError>([&] { Embedder::load(d.path().string()); },
                            {"pytorch_model.bin", "safetensors"});
    write(d / "2_Dense/config.json", R"({"in_features": 99, "out_features": 8})");
    expect_error<ConfigError>([&] { Embedder::load(d.path().string()); }, {"in_features 99"});
  }
}

TEST_F(MiniLM, BadInput) {
  auto e = Embedder::load(kMiniLM.string(), {2, {}});
  EmbedOptions query;
  query.prompt_name = "query";
  expect_error<InvalidArgument>([&] { e->encode({"x"}, query); }, {"prompt name 'query'"});
  expect_error<InvalidArgument>([&] { e->encode({"x"}, with_batch_size(0)); }, {"batch_size"});
  expect_error<InvalidArgument>([&] { e->encode({"bad \xff utf-8"}); }, {"UTF-8"});
}

TEST_F(MiniLM, EncoderRejectsBadBatches) {
  auto enc = load_encoder(kMiniLM.string(), {2, {}});
  EXPECT_EQ(enc->info().max_tokens, 512);
  EXPECT_TRUE(enc->info().uses_token_type_ids);
  auto run = [&](const EncoderBatch& b) {
    EncoderResult r;
    enc->forward(b, {}, r);
    return r;
  };
  EncoderBatch ok;
  ok.add({101, 7592, 102}, {0, 0, 1});
  ok.add({101, 102});
  EXPECT_EQ(run(ok).hidden.size(), 5u * 384);
  EncoderBatch too_long;
  too_long.add(std::vector<int64_t>(513, 1000));
  expect_error<InvalidArgument>([&] { run(too_long); }, {"513", "512"});
  EncoderBatch bad_id;
  bad_id.add({101, 30522});
  expect_error<InvalidArgument>([&] { run(bad_id); }, {"30522", "vocabulary"});
  EncoderBatch bad_type;
  bad_type.add({101, 102}, {0, 2});
  expect_error<InvalidArgument>([&] { run(bad_type); }, {"token type id 2"});
  EncoderBatch empty;
  empty.add({});
  expect_error<InvalidArgument>([&] { run(empty); }, {"empty"});
  EncoderBatch lying = ok;
  lying.lengths.back() = 7;
  expect_error<InvalidArgument>([&] { run(lying); }, {"sum to"});
  expect_error<InvalidArgument>([&] { ok.add({1, 2}, {0}); }, {"type ids"});
  EncoderOptions unknown;
  unknown.capture = {"layers.9"};
  EncoderResult r;
  expect_error<InvalidArgument>([&] { enc->forward(ok, unknown, r); }, {"layers.9"});
}

}  // namespace
}  // namespace hubzoo
