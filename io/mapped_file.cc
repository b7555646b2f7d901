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
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
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
  return {static_cast<const uint8_t*>(m), static_cast<size_t>(size)};
}

}  // namespace hubzoo
