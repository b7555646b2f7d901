// quantization_config parsing (each unsupported option a ConfigError naming
// it) and the conversion of small hand-packed GPTQ / AWQ / compressed-tensors
// tensors to Q4_G / Q8_G, checked value by value against the formats'
// documented dequantization w = scale * (q - zero).
#include "layers/hub_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "base/error.h"
#include "base/test_util.h"
#include "layers/hub_quant_spec.h"

namespace hubzoo {
namespace {

JsonObject config_with(const std::string& quant_json) {
  return JsonObject(
      parse_json("{\"hidden_size\": 64, \"quantization_config\": " + quant_json + "}", "cfg"),
      "/snap/config.json");
}

// from_config's ConfigError, whose message must name `field`.
void expect_config_error(const std::string& quant_json, const std::string& field) {
  try {
    (void)HubQuant::from_config(config_with(quant_json));
    FAIL() << "no error for " << quant_json;
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/snap/config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << "'" << field << "' not in: " << msg;
  }
}

const std::string kGptq =
    R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": false, "sym": true})";
const std::string kAwq =
    R"({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm", "zero_point": true})";

std::string ct(const std::string& weights, const std::string& extra = "",
               const std::string& format = "pack-quantized") {
  return R"({"quant_method": "compressed-tensors", "format": ")" + format +
         R"(", "quantization_status": "compressed", "ignore": ["lm_head"],
             "config_groups": {"group_0": {"targets": ["Linear"], "weights": )" +
         weights + extra + "}}}";
}
const std::string kInt4 =
    R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 32})";

TEST(HubQuantConfig, AbsentIsNullopt) {
  const JsonObject c(parse_json(R"({"hidden_size": 64})", "cfg"), "/snap/config.json");
  EXPECT_FALSE(HubQuant::from_config(c).has_value());
}

TEST(HubQuantConfig, SupportedConfigsParse) {
  auto g = HubQuant::from_config(config_with(kGptq));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->method(), HubQuantMethod::kGptq);
  EXPECT_EQ(g->describe(), "gptq int4 group 32 v1");
  auto g2 = HubQuant::from_config(config_with(
      R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": true, "checkpoint_format": "gptq_v2"})"));
  EXPECT_EQ(g2->describe(), "gptq int4 per channel desc_act v2");
  EXPECT_EQ(HubQuant::from_config(config_with(kAwq))->method(), HubQuantMethod::kAwq);
  auto c = HubQuant::from_config(config_with(ct(kInt4)));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->describe(), "compressed-tensors group_0:int4 packed group 32 sym");
  auto c8 = HubQuant::from_config(config_with(
      ct(R"({"num_bits": 8, "symmetric": false, "strategy": "channel"})", "", "int-quantized")));
  EXPECT_EQ(c8->describe(), "compressed-tensors group_0:int8 channel asym");
}

TEST(HubQuantConfig, UnsupportedOptionsAreNamed) {
  expect_config_error(R"({"quant_method": "bitsandbytes"})", "quant_method");
  expect_config_error(R"({"bits": 4})", "quant_method");
  expect_config_error(R"({"quant_method": "gptq", "bits": 8, "group_size": 128})", "bits");
  expect_config_error(R"({"quant_method": "gptq", "bits": 3, "group_size": 128})", "bits");
  expect_config_error(R"({"quant_method": "gptq", "group_size": 128})", "bits");
  expect_config_error(R"({"quant_method": "gptq", "bits": 4, "group_size": 48})", "group_size");
  expect_config_error(R"({"quant_method": "gptq", "bits": 4, "group_size": 0})", "group_size");
  expect_config_error(R"({"quant_method": "gptq", "bits": 4})", "group_size");
  expect_config_error(R"({"quant_method": "gptq", "bits": 4, "group_size": "128"})", "group_size");
  expect_config_error(
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"})",
      "checkpoint_format");
  expect_config_error(
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": "yes"})", "desc_act");
  expect_config_error(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"})",
                      "version");
  expect_config_error(
      R"({"quant_method": "awq", "bits": 4, "group_size": 128, "format": "exllama"})", "format");
  expect_config_error(
      R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": false})",
      "zero_point");
  expect_config_error(R"({"quant_method": "awq", "bits": 4, "group_size": -1})", "group_size");
}

TEST(HubQuantConfig, CompressedTensorsUnsupportedOptionsAreNamed) {
  expect_config_error(ct(kInt4, R"(, "input_activations": {"num_bits": 8, "strategy": "token",
                         "dynamic": true})"),
                      "input_activations");
  expect_config_error(ct(kInt4, R"(, "output_activations": {"num_bits": 8})"),
                      "output_activations");
  expect_config_error(ct(kInt4, "", "float-quantized"), "format");
  expect_config_error(ct(kInt4, "", "nvfp4-pack-quantized"), "format");
  expect_config_error(ct(R"({"num_bits": 2, "strategy": "group", "group_size": 32})"), "num_bits");
  expect_config_error(ct(R"({"num_bits": 8, "type": "float", "strategy": "channel"})"), "type");
  expect_config_error(ct(R"({"num_bits": 4, "strategy": "block", "block_structure": [128, 128]})"),
                      "block_structure");
  expect_config_error(ct(R"({"num_bits": 4, "strategy": "token"})"), "strategy");
  expect_config_error(ct(R"({"num_bits": 4, "strategy": "group", "group_size": 100})"),
                      "group_size");
  expect_config_error(ct(R"({"num_bits": 4, "strategy": "group"})"), "group_size");
  expect_config_error(
      ct(R"({"num_bits": 4, "strategy": "group", "group_size": 128, "actorder": "group"})"),
      "actorder");
  expect_config_error(ct(R"({"num_bits": 4, "strategy": "channel", "dynamic": true})"), "dynamic");
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed"})",
      "config_groups");
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "frozen", "config_groups": {"g": {"targets": ["Linear"]}}})",
      "quantization_status");
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed", "kv_cache_scheme": {"num_bits": 8},
          "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}}})",
      "kv_cache_scheme");
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed", "config_groups": {"g": ["Linear"]}})",
      "config_groups.g");
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed",
          "config_groups": {"g": {"targets": ["Embedding"], "weights": {"num_bits": 4}}}})",
      "targets");
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed",
          "config_groups": {"g": {"targets": ["re:(unclosed"], "weights": {"num_bits": 4}}}})",
      "targets");
  // Patterns whose backtracking could blow up are refused before any match.
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed", "ignore": ["re:(a+)+b"],
          "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}}})",
      "quantified group");
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "quantization_status": "compressed", "ignore": ["re:.*a.*b.*c.*d.*e"],
          "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}}})",
      "more than 4 quantifiers");
  expect_config_error(
      R"({"quant_method": "compressed-tensors", "format": "mixed-precision",
          "quantization_status": "compressed",
          "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4}}}})",
      "format");
}

TEST(HubQuantConfig, TargetsAndIgnore) {
  auto q = HubQuant::from_config(config_with(
      R"({"quant_method": "compressed-tensors", "format": "mixed-precision",
          "quantization_status": "compressed", "ignore": ["lm_head", "re:.*mlp\\.gate$", "re:layers\\.0"],
          "config_groups": {
            "attn": {"targets": ["re:.*self_attn"], "format": "int-quantized",
                     "weights": {"num_bits": 8, "strategy": "channel"}},
            "mlp": {"targets": ["re:.*mlp\\.", "model.layers.1.self_attn.o_proj"],
                    "format": "pack-quantized",
                    "weights": {"num_bits": 4, "strategy": "group", "group_size": 64}}}})"));
  ASSERT_TRUE(q);
  const HubQuantSpec& s = q->spec();
  EXPECT_EQ(s.ct_scheme_for("model.layers.0.self_attn.q_proj")->name, "attn");
  EXPECT_EQ(s.ct_scheme_for("model.layers.0.self_attn.q_proj")->format, CtFormat::kIntQuantized);
  EXPECT_EQ(s.ct_scheme_for("model.layers.0.mlp.up_proj")->name, "mlp");
  EXPECT_EQ(s.ct_scheme_for("model.layers.0.mlp.gate"), nullptr);  // ignored by pattern
  EXPECT_EQ(s.ct_scheme_for("lm_head"), nullptr);
  EXPECT_EQ(s.ct_scheme_for("model.embed_tokens"), nullptr);  // no target matches
  // re.match is anchored at the start: "re:layers\\.0" ignores "layers.0.x"
  // but not "model.layers.0.self_attn.q_proj" (checked above).
  EXPECT_EQ(s.ct_scheme_for("layers.0.self_attn.q_proj"), nullptr);
  try {
    s.ct_scheme_for("model.layers.1.self_attn.o_proj");
    FAIL() << "two groups target o_proj";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'attn' and 'mlp'"), std::string::npos) << e.what();
  }
}

// --- conversion -------------------------------------------------------------

// Dequantized [n, k] in original column order (k_perm undone).
std::vector<float> dequantized(const QuantMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.n * m.k));
  m.dequantize(out.data());
  return out;
}

struct Reference {  // a random grouped int4 matrix and its dequantization
  int64_t n, k, groups;
  std::vector<int> q, zero;  // q [n, k]; zero [n, groups]
  std::vector<float> scale;  // [n, groups]
  std::vector<int> g_idx;    // [k]
  float value(int64_t r, int64_t c) const {
    const int64_t g = g_idx[c];
    return scale[r * groups + g] * static_cast<float>(q[r * k + c] - zero[r * groups + g]);
  }
};

Reference make_reference(int64_t n, int64_t k, int64_t group, bool shuffle, unsigned seed) {
  std::mt19937 gen(seed);
  Reference ref{n, k, k / group, {}, {}, {}, {}};
  for (int64_t i = 0; i < n * k; ++i) ref.q.push_back(static_cast<int>(gen() % 16));
  for (int64_t i = 0; i < n * ref.groups; ++i) {
    ref.zero.push_back(static_cast<int>(gen() % 16));
    ref.scale.push_back(std::uniform_real_distribution<float>(0.001f, 0.1f)(gen));
  }
  std::vector<int> perm(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) perm[c] = static_cast<int>(c);
  if (shuffle) std::shuffle(perm.begin(), perm.end(), gen);
  ref.g_idx.resize(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) ref.g_idx[perm[i]] = static_cast<int>(i / group);
  return ref;
}

// GPTQ v1 tensors for `ref` (qweight [k/8, n], qzeros [groups, n/8] of zero - 1).
void write_gptq(const Reference& ref, const std::filesystem::path& file, bool with_g_idx) {
  std::vector<int32_t> qweight(static_cast<size_t>(ref.k / 8 * ref.n), 0);
  std::vector<int32_t> qzeros(static_cast<size_t>(ref.groups * ref.n / 8), 0);
  std::vector<float> scales(static_cast<size_t>(ref.groups * ref.n));
  for (int64_t r = 0; r < ref.n; ++r) {
    for (int64_t c = 0; c < ref.k; ++c) {
      qweight[(c / 8) * ref.n + r] |= ref.q[r * ref.k + c] << (4 * (c % 8));
    }
    for (int64_t g = 0; g < ref.groups; ++g) {
      qzeros[g * (ref.n / 8) + r / 8] |= ((ref.zero[r * ref.groups + g] - 1) & 15) << (4 * (r % 8));
      scales[g * ref.n + r] = ref.scale[r * ref.groups + g];
    }
  }
  std::vector<int32_t> g_idx(ref.g_idx.begin(), ref.g_idx.end());
  std::map<std::string, TensorView> t = {
      {"lin.qweight", {DType::I32, {ref.k / 8, ref.n}, qweight.data()}},
      {"lin.qzeros", {DType::I32, {ref.groups, ref.n / 8}, qzeros.data()}},
      {"lin.scales", {DType::F32, {ref.groups, ref.n}, scales.data()}}};
  if (with_g_idx) t["lin.g_idx"] = {DType::I32, {ref.k}, g_idx.data()};
  write_safetensors(file, t);
}

void expect_matches(const Reference& ref, const QuantMatrix& m) {
  ASSERT_EQ(m.type, QuantType::Q4_G);
  ASSERT_EQ(m.n, ref.n);
  ASSERT_EQ(m.k, ref.k);
  const auto deq = dequantized(m);
  for (int64_t r = 0; r < ref.n; ++r) {
    for (int64_t c = 0; c < ref.k; ++c) {
      ASSERT_EQ(deq[r * ref.k + c], ref.value(r, c)) << "row " << r << " col " << c;
    }
  }
}

TEST(HubQuantTake, GptqGroupsInOrder) {
  test_util::TempDir dir;
  const Reference ref = make_reference(16, 128, 64, false, 1);
  write_gptq(ref, dir.path() / "model.safetensors", true);
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  auto q = HubQuant::from_config(config_with(
      R"({"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": false, "sym": false})"));
  EXPECT_TRUE(q->is_quantized(ckpt, "lin"));
  EXPECT_FALSE(q->is_quantized(ckpt, "other"));
  EXPECT_EQ(q->stored_shape(ckpt, "lin"), (std::vector<int64_t>{16, 128}));
  std::vector<std::string> used;
  const QuantMatrix m = q->take(ckpt, "lin", 16, 128, &used);
  EXPECT_TRUE(m.k_perm.empty());
  EXPECT_EQ(used,
            (std::vector<std::string>{"lin.qweight", "lin.qzeros", "lin.scales", "lin.g_idx"}));
  expect_matches(ref, m);
}

TEST(HubQuantTake, GptqDescActPermutesColumns) {
  test_util::TempDir dir;
  const Reference ref = make_reference(8, 256, 64, true, 2);
  write_gptq(ref, dir.path() / "model.safetensors", true);
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  auto q = HubQuant::from_config(
      config_with(R"({"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": true})"));
  const QuantMatrix m = q->take(ckpt, "lin", 8, 256, nullptr);
  ASSERT_EQ(m.k_perm.size(), 256u);
  // Stored column j is input k_perm[j]; each 32-column block lies in one group.
  for (size_t j = 0; j < 256; ++j) EXPECT_EQ(ref.g_idx[m.k_perm[j]], static_cast<int>(j / 64));
  expect_matches(ref, m);
}

TEST(HubQuantTake, GptqBadTensorsNameFileTensorAndField) {
  test_util::TempDir dir;
  Reference ref = make_reference(8, 64, 32, false, 3);
  ref.g_idx[5] = 7;  // outside [0, 2)
  write_gptq(ref, dir.path() / "model.safetensors", true);
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  auto q = HubQuant::from_config(config_with(kGptq));
  try {
    (void)q->take(ckpt, "lin", 8, 64, nullptr);
    FAIL();
  } catch (const TensorMappingError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'lin.g_idx' holds group 7 at column 5"), std::string::npos) << msg;
  }
  // The config's shape disagrees with the tensors: named, nothing allocated.
  try {
    (void)q->take(ckpt, "lin", 16, 64, nullptr);
    FAIL();
  } catch (const TensorMappingError& e) {
    EXPECT_NE(std::string(e.what()).find("'lin.qweight' must be I32 [8, 16], got I32 [8, 8]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)q->take(ckpt, "lin", 8, 40, nullptr), TensorMappingError);  // k % 32
  EXPECT_THROW((void)q->take(ckpt, "missing", 8, 64, nullptr), TensorMappingError);
}

TEST(HubQuantTake, GptqGroupNotWholeBlocksIsAnError) {
  test_util::TempDir dir;
  Reference ref = make_reference(8, 64, 32, false, 4);
  std::swap(ref.g_idx[0], ref.g_idx[40]);  // group 0 and 1 each lose a column to the other
  write_gptq(ref, dir.path() / "model.safetensors", true);
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  auto q = HubQuant::from_config(config_with(kGptq));
  // Sorting by group still leaves 32 columns per group: valid, permuted.
  const QuantMatrix m = q->take(ckpt, "lin", 8, 64, nullptr);
  expect_matches(ref, m);
  ref.g_idx[1] = 1;  // group 0 now 31 columns, group 1 33
  test_util::TempDir dir2;
  write_gptq(ref, dir2.path() / "model.safetensors", true);
  const Checkpoint bad = Checkpoint::open(dir2.path());
  EXPECT_THROW((void)q->take(bad, "lin", 8, 64, nullptr), TensorMappingError);
}

TEST(HubQuantTake, AwqInterleavedOrder) {
  test_util::TempDir dir;
  const Reference ref = make_reference(16, 64, 32, false, 5);
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // AWQ's pack order
  std::vector<int32_t> qweight(static_cast<size_t>(ref.k * ref.n / 8), 0);
  std::vector<int32_t> qzeros(static_cast<size_t>(ref.groups * ref.n / 8), 0);
  std::vector<float> scales(static_cast<size_t>(ref.groups * ref.n));
  for (int64_t w = 0; w < ref.n / 8; ++w) {
    for (int i = 0; i < 8; ++i) {
      const int64_t r = w * 8 + kOrder[i];
      for (int64_t c = 0; c < ref.k; ++c) {
        qweight[c * (ref.n / 8) + w] |= ref.q[r * ref.k + c] << (4 * i);
      }
      for (int64_t g = 0; g < ref.groups; ++g) {
        qzeros[g * (ref.n / 8) + w] |= ref.zero[r * ref.groups + g] << (4 * i);
        scales[g * ref.n + r] = ref.scale[r * ref.groups + g];
      }
    }
  }
  write_safetensors(dir.path() / "model.safetensors",
                    {{"lin.qweight", {DType::I32, {ref.k, ref.n / 8}, qweight.data()}},
                     {"lin.qzeros", {DType::I32, {ref.groups, ref.n / 8}, qzeros.data()}},
                     {"lin.scales", {DType::F32, {ref.groups, ref.n}, scales.data()}}});
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  auto q = HubQuant::from_config(config_with(kAwq));
  EXPECT_EQ(q->stored_shape(ckpt, "lin"), (std::vector<int64_t>{16, 64}));
  expect_matches(ref, q->take(ckpt, "lin", 16, 64, nullptr));
}

TEST(HubQuantTake, CompressedTensorsPackedInt4WithZeroPoints) {
  test_util::TempDir dir;
  const Reference ref = make_reference(8, 64, 32, false, 6);
  // Signed q - 8 stored as q (the unsigned nibble), 8 to a word along k;
  // zero points packed the same way along n: [n/8, groups].
  std::vector<int32_t> packed(static_cast<size_t>(ref.n * ref.k / 8), 0);
  std::vector<int32_t> zp(static_cast<size_t>(ref.n / 8 * ref.groups), 0);
  for (int64_t r = 0; r < ref.n; ++r) {
    for (int64_t c = 0; c < ref.k; ++c) {
      packed[r * (ref.k / 8) + c / 8] |= ref.q[r * ref.k + c] << (4 * (c % 8));
    }
    for (int64_t g = 0; g < ref.groups; ++g) {
      zp[(r / 8) * ref.groups + g] |= ref.zero[r * ref.groups + g] << (4 * (r % 8));
    }
  }
  const std::vector<int64_t> shape = {ref.n, ref.k};
  write_safetensors(dir.path() / "model.safetensors",
                    {{"lin.weight_packed", {DType::I32, {ref.n, ref.k / 8}, packed.data()}},
                     {"lin.weight_shape", {DType::I64, {2}, shape.data()}},
                     {"lin.weight_scale", {DType::F32, {ref.n, ref.groups}, ref.scale.data()}},
                     {"lin.weight_zero_point", {DType::I32, {1, ref.groups}, zp.data()}}});
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  auto q = HubQuant::from_config(config_with(
      ct(R"({"num_bits": 4, "symmetric": false, "strategy": "group", "group_size": 32})")));
  EXPECT_TRUE(q->is_quantized(ckpt, "lin"));
  EXPECT_FALSE(q->is_quantized(ckpt, "lm_head"));
  // "Linear" matches every name, but a module without quantization tensors
  // (an embedding packed for a tied lm_head) is not quantized.
  EXPECT_FALSE(q->is_quantized(ckpt, "model.embed_tokens"));
  std::vector<std::string> used;
  expect_matches(ref, q->take(ckpt, "lin", 8, 64, &used));
  EXPECT_EQ(used.size(), 4u);
  EXPECT_THROW((void)q->take(ckpt, "lin", 8, 32, nullptr), TensorMappingError);  // weight_shape
}

TEST(HubQuantTake, CompressedTensorsInt8Channel) {
  test_util::TempDir dir;
  const int64_t n = 4, k = 32;
  std::vector<int8_t> w(n * k);
  std::vector<float> scale = {0.5f, 0.25f, 0.125f, 1.0f};
  std::vector<int8_t> zero = {0, -3, 127, -128};
  for (int64_t i = 0; i < n * k; ++i) w[i] = static_cast<int8_t>(i * 37 % 256 - 128);
  write_safetensors(dir.path() / "model.safetensors",
                    {{"lin.weight", {DType::I8, {n, k}, w.data()}},
                     {"lin.weight_scale", {DType::F32, {n, 1}, scale.data()}},
                     {"lin.weight_zero_point", {DType::I8, {n, 1}, zero.data()}},
                     {"lm_head.weight_scale", {DType::F32, {n, 1}, scale.data()}}});
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  auto q = HubQuant::from_config(config_with(
      ct(R"({"num_bits": 8, "symmetric": false, "strategy": "channel"})", "", "int-quantized")));
  const QuantMatrix m = q->take(ckpt, "lin", n, k, nullptr);
  EXPECT_EQ(m.type, QuantType::Q8_G);
  const auto deq = dequantized(m);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      EXPECT_EQ(deq[r * k + c], scale[r] * static_cast<float>(w[r * k + c] - zero[r]));
    }
  }
  // lm_head is ignored by the config but has quantization tensors.
  EXPECT_THROW((void)q->is_quantized(ckpt, "lm_head"), TensorMappingError);
}

}  // namespace
}  // namespace hubzoo
