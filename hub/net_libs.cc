#include "hub/net_libs.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <mutex>

#include "hub/http.h"

namespace hubzoo {

namespace {

// dlsym of `name` into `fn` (its type from the header); a DownloadError if absent.
template <typename Fn>
void bind(void* lib, const char* library, const char* name, Fn& fn) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (!sym) {
    const char* why = dlerror();
    throw DownloadError(std::string(library) + " has no " + name +
                        (why ? std::string(": ") + why : ""));
  }
  fn = reinterpret_cast<Fn>(sym);
}

}  // namespace

void* open_shared_library(std::initializer_list<const char*> names, const std::string& purpose) {
  std::string tried, why;
  for (const char* name : names) {
    // RTLD_NODELETE: never unmapped, so the function pointers taken from it
    // stay valid through thread-exit destructors.
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)) return lib;
    const char* e = dlerror();
    why = e ? e : "unknown";
    tried += (tried.empty() ? "" : ", ") + std::string(name);
  }
  throw DownloadError(purpose + " needs a shared library that did not load (tried " + tried +
                      "; last: " + why +
                      "); install libcurl4 and libssl3 (Debian) or their "
                      "equivalents");
}

bool shared_library_loaded(const std::string& prefix) {
  struct Search {
    const std::string* prefix;
    bool found;
  } search{&prefix, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        const char* path = info->dlpi_name ? info->dlpi_name : "";
        const char* slash = std::strrchr(path, '/');
        const std::string_view file = slash ? slash + 1 : path;
        if (file.rfind(*s->prefix, 0) == 0) s->found = true;
        return s->found ? 1 : 0;
      },
      &search);
  return search.found;
}

const CurlLib& curl_lib() {
  static const CurlLib lib = [] {
    void* h = open_shared_library({"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so"},
                                  "downloading from the Hub (libcurl)");
    const char* n = "libcurl";
    CurlLib c{};
    bind(h, n, "curl_global_init", c.global_init);
    bind(h, n, "curl_easy_init", c.easy_init);
    bind(h, n, "curl_easy_cleanup", c.easy_cleanup);
    bind(h, n, "curl_easy_reset", c.easy_reset);
    bind(h, n, "curl_easy_setopt", c.easy_setopt);
    bind(h, n, "curl_easy_getinfo", c.easy_getinfo);
    bind(h, n, "curl_easy_perform", c.easy_perform);
    bind(h, n, "curl_easy_strerror", c.easy_strerror);
    bind(h, n, "curl_slist_append", c.slist_append);
    bind(h, n, "curl_slist_free_all", c.slist_free_all);
    bind(h, n, "curl_url", c.url);
    bind(h, n, "curl_url_cleanup", c.url_cleanup);
    bind(h, n, "curl_url_set", c.url_set);
    bind(h, n, "curl_url_get", c.url_get);
    bind(h, n, "curl_free", c.free);
    if (c.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw DownloadError("libcurl: curl_global_init failed");
    }
    return c;
  }();
  return lib;
}

const CryptoLib& crypto_lib() {
  static const CryptoLib lib = [] {
    void* h = open_shared_library({"libcrypto.so.3", "libcrypto.so"},
                                  "checking downloads' sha256 (libcrypto)");
    const char* n = "libcrypto";
    CryptoLib c{};
    bind(h, n, "EVP_MD_CTX_new", c.md_ctx_new);
    bind(h, n, "EVP_MD_CTX_free", c.md_ctx_free);
    bind(h, n, "EVP_MD_CTX_copy_ex", c.md_ctx_copy_ex);
    bind(h, n, "EVP_sha256", c.sha256);
    bind(h, n, "EVP_DigestInit_ex", c.digest_init_ex);
    bind(h, n, "EVP_DigestUpdate", c.digest_update);
    bind(h, n, "EVP_DigestFinal_ex", c.digest_final_ex);
    return c;
  }();
  return lib;
}

}  // namespace hubzoo
