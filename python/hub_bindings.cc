// hubzoo._hubzoo.{ensure_snapshot, pull_snapshot, DownloadError}: the Hub
// download (hub/download.h) for from_pretrained and hubzoo.pull. The GIL is
// released while files download.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "hub/download.h"

namespace nb = nanobind;
using namespace hubzoo;

void bind_hub(nb::module_& m, nb::handle error) {
  auto download_error = nb::exception<DownloadError>(m, "DownloadError", error);
  nb::exception<NetworkError>(m, "NetworkError", download_error);
  m.def(
      "ensure_snapshot",
      [](const std::string& ref, const std::string& gguf_file, bool offline, bool quiet) {
        EnsureOptions o;
        o.offline = offline;
        o.gguf_file = gguf_file;
        if (quiet) o.progress.mode = ProgressMode::kQuiet;
        nb::gil_scoped_release release;
        return ensure_snapshot(ref, o).string();
      },
      nb::arg("ref"), nb::arg("gguf_file") = "", nb::arg("offline") = false,
      nb::arg("quiet") = false);
  m.def(
      "pull_snapshot",
      [](const std::string& repo, const std::string& revision,
         const std::vector<std::string>& include, const std::vector<std::string>& exclude,
         const std::string& gguf_file, bool quiet, int workers) {
        PullOptions o;
        o.revision = revision;
        o.files = {include, exclude, gguf_file};
        o.workers = workers;
        if (quiet) o.progress.mode = ProgressMode::kQuiet;
        nb::gil_scoped_release release;
        return pull_snapshot(repo, o).string();
      },
      nb::arg("repo"), nb::arg("revision") = "", nb::arg("include") = std::vector<std::string>{},
      nb::arg("exclude") = std::vector<std::string>{}, nb::arg("gguf_file") = "",
      nb::arg("quiet") = false, nb::arg("workers") = 8);
}
