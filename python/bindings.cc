// nanobind module `hubzoo._hubzoo`: numpy in, numpy out, over the C++ API.
// Padding is resolved here: each row's real tokens (mask != 0) become one
// sequence of a ragged TokenBatch; outputs are scattered back to [B, S, ...].
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>

#include "base/error.h"
#include "engine/scheduler.h"
#include "hub/snapshot.h"
#include "hubzoo_commit.h"  // generated at build time: HUBZOO_GIT_COMMIT
#include "models/causal_lm.h"
#include "ops/matmul.h"

namespace nb = nanobind;
using namespace hubzoo;

namespace {

using IdArray = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using FloatArray = nb::ndarray<nb::numpy, float>;

nb::ndarray<nb::numpy, float> make_array(std::vector<float>&& v, std::vector<size_t> shape) {
  auto* data = new std::vector<float>(std::move(v));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return nb::ndarray<nb::numpy, float>(data->data(), shape.size(), shape.data(), owner);
}

// An attention_mask must have input_ids' [batch, seq] shape.
void check_mask_shape(const IdArray& ids, const std::optional<IdArray>& mask) {
  if (mask && (mask->shape(0) != ids.shape(0) || mask->shape(1) != ids.shape(1))) {
    throw InvalidArgument("attention_mask shape differs from input_ids shape");
  }
}

struct Row {
  int64_t b, c;  // batch row and column of a token
};

// KV pages the Python engine's prefix cache keeps between calls (least
// recently used evicted beyond it): enough for a few thousand tokens of
// shared prefixes, not the half of MemAvailable a server's budget may be.
constexpr int64_t kEngineIdlePrefixBytes = int64_t{256} << 20;

// One row of generate_rows(): the sampling and stop conditions of one request.
struct RowOptions {
  int64_t max_tokens = 16;
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  std::vector<int64_t> stop_token_ids;  // on top of the model's EOS ids
  std::vector<std::string> stop;        // stop strings: the engine ends the row on them
  bool ignore_eos = false;
  bool skip_special_tokens = true;  // of the returned text
};

class PyCausalLM {
 public:
  PyCausalLM(const std::string& model, int threads, const std::string& dtype,
             const std::string& mode, const std::string& gguf_file, const std::string& quantize)
      : model_(
            load_causal_lm(model, LoadOptions::parse(threads, dtype, mode, quantize, gguf_file))) {}

  nb::dict info() const {
    const ModelInfo& i = model_->info();
    nb::dict d;
    d["architecture"] = i.architecture;
    d["snapshot"] = i.snapshot.string();
    d["gguf_file"] = i.gguf_file.string();
    d["config"] = i.config_json;
    d["quantized_matrices"] = i.quantized_matrices;
    d["panel_matrices"] = i.panel_matrices;
    d["quant_cache_hits"] = i.quant_cache_hits;
    d["quant_cache_stores"] = i.quant_cache_stores;
    d["weight_bytes"] = i.weight_bytes;
    d["vocab_size"] = i.vocab_size;
    d["hidden_size"] = i.hidden_size;
    d["num_layers"] = i.num_layers;
    d["eos_token_ids"] = i.eos_token_ids;
    d["bos_token_id"] = i.bos_token_id;
    d["pad_token_id"] = i.pad_token_id;
    d["num_parameters"] = i.num_parameters;
    d["ignored_tensors"] = i.ignored_tensors;
    d["ignored_modules"] = i.ignored_modules;
    d["matmul_target"] = std::string(matmul_target_name());
    d["bf16_dot_products"] = matmul_bf16_dot();
    d["bf16_tiles"] = matmul_bf16_tiles();
    d["dtype"] = std::string(i.numerics.dtype_name());
    d["mode"] = std::string(i.numerics.mode_name());
    return d;
  }

  // Full forward (prefill_len < 0) or prefill of columns [0, prefill_len) then
  // one decode step per later column.
  nb::tuple forward(IdArray ids, std::optional<IdArray> mask, std::vector<std::string> capture,
                    int64_t prefill_len) {
    const int64_t batch = ids.shape(0), seq = ids.shape(1);
    check_mask_shape(ids, mask);
    const int64_t vocab = model_->info().vocab_size;
    auto real = [&](int64_t b, int64_t c) { return !mask || (*mask)(b, c) != 0; };
    std::vector<float> logits(batch * seq * vocab, 0.0f);
    std::map<std::string, std::vector<float>> captured;
    std::map<std::string, int64_t> widths;
    ForwardOptions opt;
    opt.capture.insert(capture.begin(), capture.end());
    {
      nb::gil_scoped_release release;
      KvCache cache = model_->new_cache(batch);
      std::vector<int64_t> length(batch, 0);
      auto run = [&](int64_t c0, int64_t c1) {
        TokenBatch step;
        std::vector<Row> rows;
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t c = c0; c < c1; ++c) {
            if (!real(b, c)) continue;
            step.add(static_cast<int32_t>(ids(b, c)), static_cast<int32_t>(b),
                     static_cast<int32_t>(length[b]++));
            rows.push_back({b, c});
          }
        }
        if (step.size() == 0) return;
        ForwardResult out;
        model_->forward(step, cache, opt, out);
        for (size_t r = 0; r < rows.size(); ++r) {
          std::memcpy(&logits[(rows[r].b * seq + rows[r].c) * vocab], &out.logits[r * vocab],
                      vocab * sizeof(float));
        }
        for (auto& [name, values] : out.captured) {
          const int64_t width = static_cast<int64_t>(values.size() / rows.size());
          auto& dst = captured[name];
          if (dst.empty()) dst.assign(batch * seq * width, 0.0f);
          widths[name] = width;
          for (size_t r = 0; r < rows.size(); ++r) {
            std::memcpy(&dst[(rows[r].b * seq + rows[r].c) * width], &values[r * width],
                        width * sizeof(float));
          }
        }
      };
      if (prefill_len < 0 || prefill_len >= seq) {
        run(0, seq);
      } else {
        run(0, std::max<int64_t>(prefill_len, 0));
        for (int64_t c = std::max<int64_t>(prefill_len, 0); c < seq; ++c) run(c, c + 1);
      }
      record_cache(cache);
    }
    nb::dict caps;
    for (auto& [name, values] : captured) {
      caps[name.c_str()] =
          make_array(std::move(values), {static_cast<size_t>(batch), static_cast<size_t>(seq),
                                         static_cast<size_t>(widths[name])});
    }
    auto arr = make_array(std::move(logits), {static_cast<size_t>(batch), static_cast<size_t>(seq),
                                              static_cast<size_t>(vocab)});
    return nb::make_tuple(arr, caps);
  }

  // New tokens [batch, steps] as transformers' generate() returns them: each
  // row is one request to the Scheduler (left padding stripped via the mask),
  // every row samples from the same seed, and rows that finished early are
  // padded with pad_id up to the longest.
  nb::ndarray<nb::numpy, int64_t> generate(IdArray ids, std::optional<IdArray> mask,
                                           int64_t max_new_tokens, float temperature, int64_t top_k,
                                           float top_p, uint64_t seed, bool stop_at_eos,
                                           const std::string& constraint_kind,
                                           const std::string& constraint_text,
                                           const std::vector<std::string>& choices,
                                           int64_t kv_cache_bytes) {
    const int64_t batch = ids.shape(0), seq = ids.shape(1);
    check_mask_shape(ids, mask);
    if (max_new_tokens < 0) throw InvalidArgument("max_new_tokens must be >= 0");
    // Structured generation: one grammar for every row, the checkpoint's tokenizer.
    grammar::ConstraintSpec spec;
    if (constraint_kind == "json_schema")
      spec = {grammar::ConstraintSpec::Kind::kJsonSchema, constraint_text, {}};
    if (constraint_kind == "json_object") spec.kind = grammar::ConstraintSpec::Kind::kJsonObject;
    if (constraint_kind == "regex")
      spec = {grammar::ConstraintSpec::Kind::kRegex, constraint_text, {}};
    if (constraint_kind == "choice") spec = {grammar::ConstraintSpec::Kind::kChoice, "", choices};
    const auto constraint = grammar::Grammar::from_spec(spec);
    const Tokenizer* tokenizer = constraint ? &checkpoint_tokenizer() : nullptr;
    std::vector<GenerationRequest> requests(batch);
    for (int64_t b = 0; b < batch; ++b) {
      GenerationRequest& r = requests[b];
      for (int64_t c = 0; c < seq; ++c) {
        if (!mask || (*mask)(b, c) != 0) r.prompt.push_back(ids(b, c));
      }
      r.max_tokens = max_new_tokens;
      r.sampling = {temperature, top_k, top_p, seed};
      r.ignore_eos = !stop_at_eos;
      r.grammar = constraint;
    }
    std::vector<Completion> done;
    {
      nb::gil_scoped_release release;
      done = run_requests(*engine(requests.size(), kv_cache_bytes, tokenizer != nullptr),
                          std::move(requests));
    }
    const ModelInfo& info = model_->info();
    const int64_t pad_id = info.pad_token_id >= 0        ? info.pad_token_id
                           : !info.eos_token_ids.empty() ? info.eos_token_ids[0]
                                                         : 0;
    size_t steps = 0;
    for (const Completion& c : done) steps = std::max(steps, c.tokens.size());
    auto* data = new std::vector<int64_t>(batch * steps, pad_id);
    for (int64_t b = 0; b < batch; ++b) {
      std::copy(done[b].tokens.begin(), done[b].tokens.end(), data->begin() + b * steps);
    }
    nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
    size_t shape[2] = {static_cast<size_t>(batch), steps};
    return nb::ndarray<nb::numpy, int64_t>(data->data(), 2, shape, owner);
  }

  // One Scheduler run of independent rows, each with its own sampling, seed,
  // stop conditions and limit (what a batch job's rows carry): per row the new
  // tokens (a final EOS / stop token, or the one completing a stop string,
  // included), the finish reason and, with_text, the text the engine released
  // (a matched stop string and what follows are not in it). Stop strings and
  // text use the checkpoint's tokenizer; the engine ends a row on its stop
  // string, as it does for a server request.
  std::vector<std::tuple<std::vector<int64_t>, std::string, std::string>> generate_rows(
      const std::vector<std::vector<int64_t>>& prompts, const std::vector<RowOptions>& options,
      bool with_text) {
    if (prompts.size() != options.size()) {
      throw InvalidArgument("generate_rows: " + std::to_string(prompts.size()) + " prompts but " +
                            std::to_string(options.size()) + " option rows");
    }
    bool need_tokenizer = with_text;
    std::vector<GenerationRequest> requests(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      const RowOptions& o = options[i];
      if (o.max_tokens < 0) throw InvalidArgument("max_tokens must be >= 0");
      GenerationRequest& r = requests[i];
      r.prompt = prompts[i];
      r.max_tokens = o.max_tokens;
      r.sampling = {o.temperature, o.top_k, o.top_p, o.seed};
      r.stop_token_ids = o.stop_token_ids;
      for (const std::string& stop : o.stop) {
        if (!stop.empty()) r.stop.push_back(stop);
      }
      need_tokenizer = need_tokenizer || !r.stop.empty();
      r.ignore_eos = o.ignore_eos;
      r.skip_special_tokens = o.skip_special_tokens;
    }
    std::vector<Completion> done;
    {
      nb::gil_scoped_release release;
      done = run_requests(*engine(requests.size(), 0, need_tokenizer), std::move(requests));
    }
    std::vector<std::tuple<std::vector<int64_t>, std::string, std::string>> out;
    out.reserve(done.size());
    for (Completion& c : done) {
      out.emplace_back(std::move(c.tokens), finish_reason_name(c.reason), std::move(c.text));
    }
    return out;
  }

  std::vector<std::string> capture_names() const { return model_->capture_names(); }

  // The engine's counters since it was (re)built: prefix-cache lookups and
  // hits, pages it indexes, preemptions, KV bytes held.
  nb::dict engine_stats() {
    std::shared_ptr<Scheduler> e;
    {
      std::lock_guard lock(engine_mu_);
      e = engine_;
    }
    const SchedulerStats st = e ? e->stats() : SchedulerStats{};
    nb::dict d;
    d["prefix_cache"] = st.prefix_cache;
    d["prefix_lookup_tokens"] = st.prefix_lookup_tokens;
    d["prefix_hit_tokens"] = st.prefix_hit_tokens;
    d["prefix_cached_pages"] = st.prefix_cached_pages;
    d["preempted"] = st.preempted;
    d["kv_total_bytes"] = st.kv_total_bytes;
    d["kv_budget_bytes"] = st.kv_budget_bytes;
    d["max_slots"] = st.max_slots;
    return d;
  }
  // Drops the engine and the KV pages its prefix cache keeps between calls.
  void release_engine() {
    std::shared_ptr<Scheduler> old;
    std::lock_guard lock(engine_mu_);
    old.swap(engine_);  // a call still running keeps it alive until it returns
  }

  // The checkpoint's own tokenizer (its snapshot folder or .gguf), loaded on first use.
  const Tokenizer& checkpoint_tokenizer() {
    std::lock_guard lock(tokenizer_mu_);
    if (!tokenizer_) {
      const ModelInfo& i = model_->info();
      tokenizer_.emplace(
          Tokenizer::from_pretrained(i.gguf_file.empty() ? i.snapshot : i.gguf_file));
    }
    return *tokenizer_;
  }

  // The KV cache's own accounting after the last forward(): per layer, its
  // window (0: every position), row size, element type ("float32",
  // "bfloat16", "float16") and bytes held for each slot.
  nb::dict kv_cache_stats() const {
    nb::dict d;
    d["windows"] = last_cache_.windows;
    d["row_sizes"] = last_cache_.row_sizes;
    d["elements"] = last_cache_.elements;
    d["layer_slot_bytes"] = last_cache_.layer_slot_bytes;
    d["lengths"] = last_cache_.lengths;
    d["bytes"] = last_cache_.bytes;
    return d;
  }
  // Bytes one sequence's KV takes at n positions (what a KV budget reserves).
  int64_t kv_slot_bytes_at(int64_t n) const { return model_->new_cache(1).slot_bytes_at(n); }

 private:
  // The Scheduler generate() and generate_rows() run on, kept between calls
  // so that its prefix cache serves later calls (a shared system prompt, the
  // next turn of a conversation) as the server's does. Rebuilt (its cache
  // dropped) only when a call needs more slots, another KV budget, or a
  // tokenizer it was built without. Calls from several threads share it.
  std::shared_ptr<Scheduler> engine(size_t rows, int64_t kv_cache_bytes, bool need_tokenizer) {
    const Tokenizer* tokenizer = need_tokenizer ? &checkpoint_tokenizer() : nullptr;
    std::lock_guard lock(engine_mu_);
    const int64_t slots = static_cast<int64_t>(rows);
    if (engine_ && engine_->options().max_slots >= slots && engine_kv_bytes_ == kv_cache_bytes &&
        (!need_tokenizer || engine_tokenizer_)) {
      return engine_;
    }
    SchedulerOptions o;
    o.max_slots = std::max<int64_t>({slots, engine_ ? engine_->options().max_slots : 0, 16});
    o.max_queue = int64_t{1} << 30;         // concurrent calls queue for slots
    o.max_batch_tokens = int64_t{1} << 16;  // a batch's prompts prefill in one step
    o.kv_cache_bytes = kv_cache_bytes;
    o.max_idle_prefix_bytes = kEngineIdlePrefixBytes;
    if (!tokenizer && engine_tokenizer_) tokenizer = engine_tokenizer_;
    engine_ = std::make_shared<Scheduler>(*model_, tokenizer, o);
    engine_kv_bytes_ = kv_cache_bytes;
    engine_tokenizer_ = tokenizer;
    return engine_;
  }

  struct CacheStats {
    std::vector<int64_t> windows, row_sizes, lengths;
    std::vector<std::string> elements;
    std::vector<std::vector<int64_t>> layer_slot_bytes;
    int64_t bytes = 0;
  };
  void record_cache(const KvCache& cache) {
    CacheStats s;
    for (int64_t l = 0; l < cache.num_layers(); ++l) {
      s.windows.push_back(cache.window(l));
      s.row_sizes.push_back(cache.row_size(l));
      s.elements.push_back(kv_element_name(cache.element_type(l)));
      auto& per_slot = s.layer_slot_bytes.emplace_back();
      for (int64_t slot = 0; slot < cache.num_slots(); ++slot) {
        per_slot.push_back(cache.bytes(l, slot));
      }
    }
    for (int64_t slot = 0; slot < cache.num_slots(); ++slot)
      s.lengths.push_back(cache.length(slot));
    s.bytes = cache.bytes();
    last_cache_ = std::move(s);
  }

  std::unique_ptr<CausalLM> model_;
  std::mutex tokenizer_mu_;
  std::optional<Tokenizer> tokenizer_;  // stop strings, text, structured generation
  CacheStats last_cache_;
  // Destroyed before model_ and tokenizer_, which it uses.
  std::mutex engine_mu_;
  std::shared_ptr<Scheduler> engine_;
  int64_t engine_kv_bytes_ = 0;
  const Tokenizer* engine_tokenizer_ = nullptr;
};

}  // namespace

void bind_tokenizer(nb::module_& m);              // python/tokenizer_bindings.cc
void bind_chat_template(nb::module_& m);          // python/chat_template_bindings.cc
void bind_ops(nb::module_& m);                    // python/ops_bindings.cc
void bind_embed(nb::module_& m);                  // python/embed_bindings.cc
void bind_quant(nb::module_& m);                  // python/quant_bindings.cc
void bind_gguf_import(nb::module_& m);            // python/gguf_import_bindings.cc
void bind_gguf(nb::module_& m);                   // python/gguf_bindings.cc
void bind_hub_quant(nb::module_& m);              // python/hub_quant_bindings.cc
void bind_hub(nb::module_& m, nb::handle error);  // python/hub_bindings.cc
void bind_seq2seq(nb::module_& m);                // python/seq2seq_bindings.cc
void bind_grammar(nb::module_& m);                // python/grammar_bindings.cc
void bind_rerank(nb::module_& m);                 // python/rerank_bindings.cc

NB_MODULE(_hubzoo, m) {
  m.attr("__version__") = HUBZOO_VERSION;
  m.attr("git_commit") = HUBZOO_GIT_COMMIT;
  auto error = nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  nb::exception<FileError>(m, "FileError", error);
  nb::exception<FormatError>(m, "FormatError", error);
  nb::exception<ConfigError>(m, "ConfigError", error);
  nb::exception<TensorMappingError>(m, "TensorMappingError", error);
  nb::exception<NotFoundError>(m, "NotFoundError", error);
  nb::exception<InvalidArgument>(m, "InvalidArgument", error);
  m.def("matmul_target", [] { return std::string(matmul_target_name()); });
  m.def(
      "resolve_snapshot", [](const std::string& ref) { return resolve_snapshot(ref).string(); },
      nb::arg("ref"));
  bind_tokenizer(m);
  bind_chat_template(m);
  bind_quant(m);
  bind_ops(m);
  bind_embed(m);
  bind_rerank(m);
  bind_gguf_import(m);
  bind_gguf(m);
  bind_hub_quant(m);
  bind_hub(m, error);
  bind_seq2seq(m);
  bind_grammar(m);

  nb::class_<RowOptions>(m, "RowOptions")
      .def(nb::init<>())
      .def_rw("max_tokens", &RowOptions::max_tokens)
      .def_rw("temperature", &RowOptions::temperature)
      .def_rw("top_k", &RowOptions::top_k)
      .def_rw("top_p", &RowOptions::top_p)
      .def_rw("seed", &RowOptions::seed)
      .def_rw("stop_token_ids", &RowOptions::stop_token_ids)
      .def_rw("stop", &RowOptions::stop)
      .def_rw("ignore_eos", &RowOptions::ignore_eos)
      .def_rw("skip_special_tokens", &RowOptions::skip_special_tokens);

  nb::class_<PyCausalLM>(m, "CausalLM")
      .def(nb::init<const std::string&, int, const std::string&, const std::string&,
                    const std::string&, const std::string&>(),
           nb::arg("model"), nb::arg("threads") = 0, nb::arg("dtype") = "float32",
           nb::arg("mode") = "fused", nb::arg("gguf_file") = "", nb::arg("quantize") = "")
      .def("info", &PyCausalLM::info)
      .def("capture_names", &PyCausalLM::capture_names)
      .def("kv_cache_stats", &PyCausalLM::kv_cache_stats)
      .def("kv_slot_bytes_at", &PyCausalLM::kv_slot_bytes_at, nb::arg("n"))
      .def("forward", &PyCausalLM::forward, nb::arg("ids"), nb::arg("mask").none(),
           nb::arg("capture"), nb::arg("prefill_len"))
      .def("generate", &PyCausalLM::generate, nb::arg("ids"), nb::arg("mask").none(),
           nb::arg("max_new_tokens"), nb::arg("temperature"), nb::arg("top_k"), nb::arg("top_p"),
           nb::arg("seed"), nb::arg("stop_at_eos") = true, nb::arg("constraint_kind") = "",
           nb::arg("constraint_text") = "", nb::arg("choices") = std::vector<std::string>{},
           nb::arg("kv_cache_bytes") = 0)
      .def("engine_stats", &PyCausalLM::engine_stats)
      .def("release_engine", &PyCausalLM::release_engine)
      .def("generate_rows", &PyCausalLM::generate_rows, nb::arg("prompts"), nb::arg("options"),
           nb::arg("with_text") = false);
}
