#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace hubzoo {

FileMapping map_regular_file(const std::filesystem::path& path, uint64_t min_size,
                             const std::string& header) {
  const std::string p = path.string();
  const auto errno_str = [] { return std::string(std::strerror(errno)); };
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // before fstat could refuse it (a FIFO named model.safetensors hung a
  // load); it changes nothing for a regular file, which is only mapped.
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw FileError(p + ": cannot open: " + errno_str());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw FileError(p + ": cannot stat: " + errno_str());
  if (!S_ISREG(st.st_mode)) throw FileError(p + ": not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < min_size) {
    throw FormatError(p + ": file is " + std::to_string(size) + " bytes, shorter than the " +
                      header);
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) throw FileError(p + ": cannot mmap: " + errno_str());
  // No huge-page mappings of the file. Where the page cache holds it in 2 MiB
  // folios (ext4 on Linux 6.16+ after a cold read), a read fault maps the whole
  // folio: touching one small tensor made 2 MiB resident, and the pages a
  // loader had dropped (weights repacked into panels or packs) came back with
  // their neighbours. Measured on SmolLM2-135M after evicting and re-reading
  // the file: int8 on the Q4_K GGUF peaked at 200 MB instead of 153, fp32
  // safetensors at 680 MB instead of 555; decode speed did not move.
  // Advice only: where it fails (no THP) nothing is mapped huge anyway.
  ::madvise(m, size, MADV_NOHUGEPAGE);
  return {static_cast<const uint8_t*>(m), static_cast<size_t>(size)};
}

void release_whole_pages(const void* begin, const void* end) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t hi = reinterpret_cast<uintptr_t>(end) / page * page;
  if (lo < hi) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace hubzoo
