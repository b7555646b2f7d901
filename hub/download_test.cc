// The pure parts of the Hub download: globs, default file selection, the
// model-info answer (untrusted), headers, URLs, cache paths and links,
// `cache ls` / `cache rm`. The network parts run against a mock Hub in
// python/tests/test_hub_download.py.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/test_util.h"
#include "hub/cache.h"
#include "hub/http.h"
#include "hub/net_libs.h"
#include "hub/progress.h"
#include "hub/repo_files.h"

namespace hubzoo {
namespace {

namespace fs = std::filesystem;
using test_util::TempDir;

// First in the file (gtest runs tests in definition order; ctest runs each
// alone): nothing has touched the network yet, so libcurl and libcrypto are
// not mapped; the first URL parse or hash opens them.
TEST(NetLibs, OpenedOnFirstUseOnly) {
  EXPECT_FALSE(shared_library_loaded("libcurl"));
  EXPECT_FALSE(shared_library_loaded("libcrypto"));
  EXPECT_FALSE(shared_library_loaded("libgnutls"));
  EXPECT_TRUE(shared_library_loaded("libc.so"));  // the search itself works
  EXPECT_EQ(url_origin("http://127.0.0.1:8080/x"), "http://127.0.0.1:8080");
  EXPECT_TRUE(shared_library_loaded("libcurl"));
  const CryptoLib& c = crypto_lib();
  EXPECT_TRUE(shared_library_loaded("libcrypto"));
  // sha256("abc"), FIPS 180-2's example.
  EVP_MD_CTX* md = c.md_ctx_new();
  ASSERT_NE(md, nullptr);
  ASSERT_EQ(c.digest_init_ex(md, c.sha256(), nullptr), 1);
  ASSERT_EQ(c.digest_update(md, "abc", 3), 1);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  ASSERT_EQ(c.digest_final_ex(md, d, &n), 1);
  c.md_ctx_free(md);
  ASSERT_EQ(n, 32u);
  EXPECT_EQ(d[0], 0xba);
  EXPECT_EQ(d[1], 0x78);
  EXPECT_EQ(d[31], 0xad);
}

TEST(NetLibs, AMissingLibraryIsANamedError) {
  try {
    open_shared_library({"libhubzoo-absent.so.9", "libhubzoo-absent.so"}, "testing the loader");
    FAIL() << "expected a DownloadError";
  } catch (const DownloadError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("testing the loader"), std::string::npos) << what;
    EXPECT_NE(what.find("libhubzoo-absent.so.9, libhubzoo-absent.so"), std::string::npos) << what;
  }
}

TEST(Glob, MatchesAsPythonFnmatch) {
  EXPECT_TRUE(glob_match("*.safetensors", "model.safetensors"));
  EXPECT_TRUE(glob_match("*.safetensors", "sub/model.safetensors"));  // '*' crosses '/'
  EXPECT_FALSE(glob_match("*.safetensors", "model.safetensors.index.json"));
  EXPECT_TRUE(glob_match("model-0000?-of-00002.*", "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(glob_match("[0-9]_*/*", "1_Pooling/config.json"));
  EXPECT_FALSE(glob_match("[!0-9]_*/*", "1_Pooling/config.json"));
  EXPECT_TRUE(glob_match("onnx/", "onnx/model.onnx"));  // a folder pattern
  EXPECT_FALSE(glob_match("onnx/", "onnx"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_FALSE(glob_match("?", ""));
  EXPECT_TRUE(glob_match("a*b*c*d", "axxbyyczzd"));
  EXPECT_FALSE(glob_match("a*b*c*d", "axxbyyczz"));
  EXPECT_TRUE(glob_match("[", "["));  // an unclosed class is a literal '['
}

TEST(Glob, ManyStarsStayLinear) {
  // A backtracking matcher without memo would take exponential time here.
  const std::string name(5000, 'a');
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*b", name));
}

std::vector<std::string> kRepo = {"config.json",
                                  "generation_config.json",
                                  "model-00001-of-00002.safetensors",
                                  "model-00002-of-00002.safetensors",
                                  "model.safetensors.index.json",
                                  "pytorch_model.bin",
                                  "tf_model.h5",
                                  "flax_model.msgpack",
                                  "onnx/model.onnx",
                                  "onnx/config.json",
                                  "README.md",
                                  "tokenizer.json",
                                  "tokenizer_config.json",
                                  "special_tokens_map.json",
                                  "chat_template.jinja",
                                  "modules.json",
                                  "sentence_bert_config.json",
                                  "config_sentence_transformers.json",
                                  "1_Pooling/config.json",
                                  "2_Dense/model.safetensors",
                                  "2_Dense/pytorch_model.bin"};

TEST(SelectFiles, DefaultsAreWhatHubzooRuns) {
  const std::vector<std::string> want = {"config.json",
                                         "generation_config.json",
                                         "model-00001-of-00002.safetensors",
                                         "model-00002-of-00002.safetensors",
                                         "model.safetensors.index.json",
                                         "tokenizer.json",
                                         "tokenizer_config.json",
                                         "special_tokens_map.json",
                                         "chat_template.jinja",
                                         "modules.json",
                                         "sentence_bert_config.json",
                                         "config_sentence_transformers.json",
                                         "1_Pooling/config.json",
                                         "2_Dense/model.safetensors"};
  EXPECT_EQ(select_files(kRepo, {}), want);
}

TEST(SelectFiles, IncludeAddsExcludeRemoves) {
  FileSelection sel;
  sel.include = {"*.bin"};
  sel.exclude = {"generation_config.json", "2_Dense/"};
  const auto got = select_files(kRepo, sel);
  EXPECT_NE(std::find(got.begin(), got.end(), "pytorch_model.bin"), got.end());
  EXPECT_EQ(std::find(got.begin(), got.end(), "generation_config.json"), got.end());
  EXPECT_EQ(std::find(got.begin(), got.end(), "2_Dense/pytorch_model.bin"), got.end());
  EXPECT_EQ(std::find(got.begin(), got.end(), "2_Dense/model.safetensors"), got.end());
}

TEST(SelectFiles, GgufRepoTakesTheOneFileAsked) {
  const std::vector<std::string> repo = {"README.md", "m.Q4_K_M.gguf", "m.Q8_0.gguf",
                                         "config.json"};
  FileSelection sel;
  sel.gguf_file = "m.Q8_0.gguf";
  EXPECT_EQ(select_files(repo, sel), std::vector<std::string>{"m.Q8_0.gguf"});
  try {
    select_files(repo, {});
    FAIL() << "expected DownloadError";
  } catch (const DownloadError& e) {
    EXPECT_NE(std::string(e.what()).find("--gguf-file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.Q4_K_M.gguf"), std::string::npos) << e.what();
  }
  sel.gguf_file = "missing.gguf";
  EXPECT_THROW(select_files(repo, sel), DownloadError);
}

TEST(RepoInfo, ParsesShaAndSiblings) {
  const RepoInfo info = parse_repo_info(
      R"({"id":"a/b","sha":"0123456789abcdef0123456789abcdef01234567",)"
      R"("siblings":[{"rfilename":"config.json"},{"rfilename":"1_Pooling/config.json"}]})");
  EXPECT_EQ(info.commit, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(info.files, (std::vector<std::string>{"config.json", "1_Pooling/config.json"}));
}

void expect_rejected(const std::string& json, const std::string& says) {
  try {
    parse_repo_info(json);
    FAIL() << "accepted: " << json.substr(0, 200);
  } catch (const DownloadError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(RepoInfo, HostileAnswersAreRejected) {
  const std::string sha = R"("sha":"0123456789abcdef0123456789abcdef01234567")";
  expect_rejected("not json", "not a JSON object");
  expect_rejected("[1,2]", "not a JSON object");
  expect_rejected(R"({"sha":"main","siblings":[]})", "40-hex");
  expect_rejected("{" + sha + "}", "siblings");
  expect_rejected("{" + sha + R"(,"siblings":[{"rfilename":3}]})", "rfilename");
  for (const char* evil :
       {"../../evil", "/etc/passwd", "a/../../b", "a//b", "a\\\\b", "./x", "x/", "a\\u0000b"}) {
    expect_rejected("{" + sha + R"(,"siblings":[{"rfilename":")" + evil + R"("}]})",
                    "would leave the snapshot folder");
  }
  // Bounded: too many files, too many bytes, deep nesting (the parser's depth is
  // bounded by the byte bound; this must fail cleanly, not overflow the stack).
  std::string many = "{" + sha + R"(,"siblings":[)";
  for (size_t i = 0; i <= kMaxRepoFiles; ++i) many += (i ? "," : "") + std::string("{}");
  expect_rejected(many + "]}", "more than");
  expect_rejected(std::string(kMaxRepoInfoBytes + 1, ' '), "bytes");
  expect_rejected(std::string(100000, '[') + std::string(100000, ']'), "not a JSON object");
}

TEST(RepoPaths, SafeNamesAndEtags) {
  EXPECT_TRUE(is_safe_repo_path("config.json"));
  EXPECT_TRUE(is_safe_repo_path("1_Pooling/config.json"));
  EXPECT_TRUE(is_safe_repo_path("a..b"));
  EXPECT_FALSE(is_safe_repo_path(""));
  EXPECT_FALSE(is_safe_repo_path(".."));
  EXPECT_FALSE(is_safe_repo_path(std::string(1025, 'a')));
  EXPECT_TRUE(is_safe_etag("a2ef5ef0c987bdcc410d9f03af8c3ffcea93185965b8759edab8a35eacc4594f"));
  EXPECT_FALSE(is_safe_etag("../blobs"));
  EXPECT_FALSE(is_safe_etag(".."));
  EXPECT_FALSE(is_safe_etag(""));
  EXPECT_EQ(normalize_etag("W/\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("\"abc\""), "abc");
  EXPECT_EQ(normalize_etag("abc"), "abc");
}

TEST(Http, HeaderLines) {
  std::string name, value;
  ASSERT_TRUE(parse_header_line("X-Linked-Etag: \"abc\"\r\n", name, value));
  EXPECT_EQ(name, "x-linked-etag");
  EXPECT_EQ(value, "\"abc\"");
  ASSERT_TRUE(parse_header_line("Location:http://cdn/x?a=b:c\r\n", name, value));
  EXPECT_EQ(value, "http://cdn/x?a=b:c");
  EXPECT_FALSE(parse_header_line("HTTP/1.1 302 Found\r\n", name, value));
  EXPECT_FALSE(parse_header_line("\r\n", name, value));
  EXPECT_FALSE(parse_header_line(": no name\r\n", name, value));
  EXPECT_FALSE(parse_header_line("Bad Name: x\r\n", name, value));
}

TEST(Http, UrlsAndOrigins) {
  EXPECT_EQ(resolve_url("http://h:1/a/resolve/x", "/b/resolve/x"), "http://h:1/b/resolve/x");
  EXPECT_EQ(resolve_url("http://h:1/a", "http://cdn:2/blob?x=1"), "http://cdn:2/blob?x=1");
  EXPECT_EQ(url_origin("https://HuggingFace.co/api/x"), "https://huggingface.co:443");
  EXPECT_EQ(url_origin("http://127.0.0.1:8080/x"), "http://127.0.0.1:8080");
  EXPECT_NE(url_origin("http://127.0.0.1:8080/x"), url_origin("http://127.0.0.1:8081/x"));
  EXPECT_EQ(url_quote("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(url_quote("a b/c.json", true), "a%20b/c.json");
}

TEST(Http, TimeoutsFromEnvironmentAreChecked) {
  ::setenv("HF_HUB_DOWNLOAD_TIMEOUT", "2.5", 1);
  EXPECT_DOUBLE_EQ(http_options_from_env().read_timeout_s, 2.5);
  ::setenv("HF_HUB_DOWNLOAD_TIMEOUT", "soon", 1);
  EXPECT_THROW(http_options_from_env(), InvalidArgument);
  ::unsetenv("HF_HUB_DOWNLOAD_TIMEOUT");
  ::setenv("HUBZOO_HTTP_RETRIES", "-1", 1);
  EXPECT_THROW(http_options_from_env(), InvalidArgument);
  ::unsetenv("HUBZOO_HTTP_RETRIES");
}

TEST(Cache, PathsAndLinksAsHuggingfaceHub) {
  TempDir tmp;
  const RepoCache c{tmp.path(), "org/name"};
  EXPECT_EQ(repo_folder_name("org/name"), "models--org--name");
  EXPECT_EQ(repo_folder_name("gpt2"), "models--gpt2");
  EXPECT_EQ(c.blob("e"), tmp.path() / "models--org--name" / "blobs" / "e");
  EXPECT_EQ(c.lock("e"), tmp.path() / ".locks" / "models--org--name" / "e.lock");
  fs::create_directories(c.dir() / "blobs");
  std::ofstream(c.blob("e")) << "x";
  const std::string commit(40, 'a');
  link_snapshot_file(c, commit, "1_Pooling/config.json", "e");
  link_snapshot_file(c, commit, "config.json", "e");
  EXPECT_EQ(fs::read_symlink(c.snapshot(commit) / "1_Pooling/config.json"), "../../../blobs/e");
  EXPECT_EQ(fs::read_symlink(c.snapshot(commit) / "config.json"), "../../blobs/e");
  EXPECT_TRUE(snapshot_has_file(c, commit, "config.json"));
  EXPECT_FALSE(snapshot_has_file(c, commit, "model.safetensors"));
  link_snapshot_file(c, commit, "config.json", "e");  // replacing is fine
  write_ref(c, "refs/pr/1", commit);
  std::ifstream in(c.ref("refs/pr/1"));
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, commit);  // no newline, as huggingface_hub writes
}

TEST(Cache, LsAndRm) {
  TempDir tmp;
  const RepoCache c{tmp.path(), "org/name"};
  fs::create_directories(c.dir() / "blobs");
  std::ofstream(c.blob("cfg")) << "{}";
  std::ofstream(c.blob("w")) << "0123456789";
  std::ofstream(c.blob("old")) << "01234";
  const std::string a(40, 'a'), b(40, 'b');
  link_snapshot_file(c, a, "config.json", "cfg");
  link_snapshot_file(c, a, "model.safetensors", "w");
  link_snapshot_file(c, b, "config.json", "cfg");
  link_snapshot_file(c, b, "model.safetensors", "old");
  write_ref(c, "main", a);
  auto repos = scan_cache(tmp.path());
  ASSERT_EQ(repos.size(), 1u);
  EXPECT_EQ(repos[0].repo_id, "org/name");
  EXPECT_EQ(repos[0].size_bytes, 17u);
  ASSERT_EQ(repos[0].revisions.size(), 2u);
  EXPECT_EQ(repos[0].revisions[0].refs, std::vector<std::string>{"main"});
  EXPECT_TRUE(repos[0].revisions[0].runnable);
  EXPECT_EQ(repos[0].revisions[0].files, 2u);
  // Removing revision b frees only the blob no other snapshot links to.
  EXPECT_EQ(remove_from_cache(tmp.path(), "org/name", b), 5u);
  EXPECT_FALSE(fs::exists(c.blob("old")));
  EXPECT_TRUE(fs::exists(c.blob("w")));
  EXPECT_THROW(remove_from_cache(tmp.path(), "org/name", b), NotFoundError);
  EXPECT_THROW(remove_from_cache(tmp.path(), "../x", std::nullopt), InvalidArgument);
  EXPECT_EQ(remove_from_cache(tmp.path(), "org/name", std::nullopt), 12u);
  EXPECT_FALSE(fs::exists(c.dir()));
  EXPECT_THROW(remove_from_cache(tmp.path(), "org/name", std::nullopt), NotFoundError);
}

TEST(Progress, LinesWhenNotATerminal) {
  std::vector<std::string> lines;
  ProgressOptions o;
  o.log = [&](const std::string& l) { lines.push_back(l); };
  DownloadProgress p(o);
  p.begin("org/name", 2, 3000);
  p.add_bytes("a", 1000, 1000);
  p.file_done("a", 1000, false);
  p.file_done("b", 2000, true);
  p.finish("/snap");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "downloading org/name: 2 files, 3.0 kB");
  EXPECT_EQ(lines[1].rfind("[1/2] a 1.0 kB (total 1.0 kB at ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2], "[2/2] b 2.0 kB (cached)");
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(1500000), "1.5 MB");
}

}  // namespace
}  // namespace hubzoo
