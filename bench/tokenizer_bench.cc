// Single-threaded encode throughput of hubzoo::Tokenizer over a corpus: each
// document encoded one by one (encode) and the whole corpus at once
// (encode_batch), both with add_special_tokens = true. Driven by
// bench/tokenizer_bench.py, which runs HF `tokenizers` on the same corpus and
// checks that the ids are identical.
//
//   tokenizer_bench --tokenizer tokenizer.json --corpus corpus.json [--repeats N]
//                   [--as-configured] [--ids-out FILE]
//
// The corpus is a JSON list of strings. Unless --as-configured, the
// tokenizer's truncation and padding are removed (as HF's no_truncation() /
// no_padding()) so every document is tokenized whole. Prints one JSON object:
// per-repeat seconds, medians, tokens, CPU/wall time (1.0 when one thread ran).
// --ids-out writes, per document, a little-endian uint32 count and the uint32
// ids from encode; encode_batch is checked against it here.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "hubzoo_commit.h"  // generated at build time: HUBZOO_GIT_COMMIT
#include "io/json.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Through io's one JSON reader; a bad file ends the bench with its message.
Json read_json(const std::string& path) {
  try {
    return hubzoo::read_json_file(path);
  } catch (const hubzoo::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(2);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `fn` `repeats` times after one warm-up run: per-run wall and process
// CPU seconds, and CPU/wall over the timed runs (at most 1.0 with one thread).
template <typename Fn>
Json time_runs(int repeats, Fn&& fn) {
  fn();  // warm-up (fills the BPE word cache, as HF's warm-up does)
  std::vector<double> times, cpu_times;
  const double cpu0 = cpu_seconds();
  const auto wall0 = Clock::now();
  for (int r = 0; r < repeats; ++r) {
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    cpu_times.push_back(cpu_seconds() - c0);
  }
  const double wall = std::chrono::duration<double>(Clock::now() - wall0).count();
  return {{"times_s", times},
          {"cpu_times_s", cpu_times},
          {"median_s", median(times)},
          {"cpu_over_wall", (cpu_seconds() - cpu0) / wall}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, corpus_path, ids_out;
  int repeats = 5;
  bool as_configured = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
      tokenizer_path = argv[++i];
    } else if (!std::strcmp(argv[i], "--corpus") && i + 1 < argc) {
      corpus_path = argv[++i];
    } else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--ids-out") && i + 1 < argc) {
      ids_out = argv[++i];
    } else if (!std::strcmp(argv[i], "--as-configured")) {
      as_configured = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s --tokenizer tokenizer.json --corpus corpus.json [--repeats N] "
                   "[--as-configured] [--ids-out FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  if (tokenizer_path.empty() || corpus_path.empty()) {
    std::fprintf(stderr, "--tokenizer and --corpus are required\n");
    return 2;
  }

  Json tj = read_json(tokenizer_path);
  if (!as_configured) {
    tj["truncation"] = nullptr;
    tj["padding"] = nullptr;
  }
  const auto load0 = Clock::now();
  const hubzoo::Tokenizer tok = hubzoo::Tokenizer::from_json(tj, tokenizer_path);
  const double load_s = std::chrono::duration<double>(Clock::now() - load0).count();

  const std::vector<std::string> docs = read_json(corpus_path).get<std::vector<std::string>>();
  size_t bytes = 0;
  for (const std::string& d : docs) bytes += d.size();

  // Reference ids from one encode pass (outside the timings).
  std::vector<std::vector<int64_t>> ids;
  ids.reserve(docs.size());
  size_t tokens = 0;
  for (const std::string& d : docs) {
    ids.push_back(tok.encode(d, true).ids);
    tokens += ids.back().size();
  }

  size_t sink = 0;  // keeps the encodes observable
  Json encode = time_runs(repeats, [&] {
    for (const std::string& d : docs) sink += tok.encode(d, true).size();
  });
  std::vector<hubzoo::Encoding> batch;
  Json encode_batch = time_runs(repeats, [&] {
    batch = tok.encode_batch(docs, true);
    sink += batch.size();
  });

  for (size_t i = 0; i < docs.size(); ++i) {
    if (batch[i].ids != ids[i]) {
      std::fprintf(stderr, "encode_batch differs from encode on document %zu\n", i);
      return 1;
    }
  }
  if (!ids_out.empty()) {
    std::ofstream out(ids_out, std::ios::binary);
    for (const auto& v : ids) {
      const auto n = static_cast<uint32_t>(v.size());
      out.write(reinterpret_cast<const char*>(&n), 4);
      for (int64_t id : v) {
        const auto u = static_cast<uint32_t>(id);
        out.write(reinterpret_cast<const char*>(&u), 4);
      }
    }
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", ids_out.c_str());
      return 2;
    }
  }

  char pcre2_version[64] = {};
  pcre2_config(PCRE2_CONFIG_VERSION, pcre2_version);
  const Json report = {
      {"tokenizer", tokenizer_path},
      {"as_configured", as_configured},
      {"documents", docs.size()},
      {"bytes", bytes},
      {"tokens", tokens},
      {"repeats", repeats},
      {"threads", 1},
      {"load_s", load_s},
      {"encode", encode},
      {"encode_batch", encode_batch},
      {"sink", sink},
      {"hubzoo_version", HUBZOO_VERSION},
      {"git_commit", HUBZOO_GIT_COMMIT},
      {"compiler", __VERSION__},
#ifdef NDEBUG
      {"ndebug", true},
#else
      {"ndebug", false},
#endif
      {"pcre2", pcre2_version},
  };
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}
