// The network libraries, loaded when a download first needs them.
//
// libcurl (HTTP, TLS, proxies) and libcrypto (sha256 of downloaded files) are
// opened with dlopen on first use rather than linked: linking them maps
// libcurl's whole chain (gnutls, krb5, ldap, ssh2, nghttp2, ...: ~30 shared
// libraries, ~5.5 MB resident, and their start-up constructors) into every
// process, including the runs of a local model that never touch the network
// (docs/architecture.md, "Freed memory goes back to the system").
//
// The function types come from the libraries' own headers (decltype), so a
// signature can never drift from what the compiler checked.
#pragma once

#include <curl/curl.h>
#include <openssl/evp.h>

#include <initializer_list>
#include <string>

namespace hubzoo {

struct CurlLib {
  decltype(&::curl_global_init) global_init;
  decltype(&::curl_easy_init) easy_init;
  decltype(&::curl_easy_cleanup) easy_cleanup;
  decltype(&::curl_easy_reset) easy_reset;
  decltype(&::curl_easy_setopt) easy_setopt;
  decltype(&::curl_easy_getinfo) easy_getinfo;
  decltype(&::curl_easy_perform) easy_perform;
  decltype(&::curl_easy_strerror) easy_strerror;
  decltype(&::curl_slist_append) slist_append;
  decltype(&::curl_slist_free_all) slist_free_all;
  decltype(&::curl_url) url;
  decltype(&::curl_url_cleanup) url_cleanup;
  decltype(&::curl_url_set) url_set;
  decltype(&::curl_url_get) url_get;
  decltype(&::curl_free) free;
};

struct CryptoLib {
  decltype(&::EVP_MD_CTX_new) md_ctx_new;
  decltype(&::EVP_MD_CTX_free) md_ctx_free;
  decltype(&::EVP_MD_CTX_copy_ex) md_ctx_copy_ex;
  decltype(&::EVP_sha256) sha256;
  decltype(&::EVP_DigestInit_ex) digest_init_ex;
  decltype(&::EVP_DigestUpdate) digest_update;
  decltype(&::EVP_DigestFinal_ex) digest_final_ex;
};

// libcurl (curl_global_init already called), loaded once; a DownloadError
// naming the library and dlopen's reason if it is missing.
const CurlLib& curl_lib();
// libcrypto, loaded once; a DownloadError if it is missing.
const CryptoLib& crypto_lib();

// The first of `names` that dlopen finds (kept open for the process's
// lifetime); a DownloadError naming `purpose`, every name tried and dlopen's
// last reason when none loads.
void* open_shared_library(std::initializer_list<const char*> names, const std::string& purpose);
// Whether a shared library whose file name starts with `prefix` (e.g.
// "libcurl.so") is mapped into this process.
bool shared_library_loaded(const std::string& prefix);

}  // namespace hubzoo
