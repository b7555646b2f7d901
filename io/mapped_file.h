// Read-only mapping of a regular file, shared by the safetensors and GGUF readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace hubzoo {

// Opens `path`, refuses anything but a regular file (a FIFO or /dev/zero would
// never end), checks it holds at least `min_size` bytes (else FormatError
// "<path>: file is N bytes, shorter than the <header>") and maps it read-only.
// The caller owns the mapping (munmap(data, size)). FileError for I/O failures.
struct FileMapping {
  const uint8_t* data = nullptr;
  size_t size = 0;
};
FileMapping map_regular_file(const std::filesystem::path& path, uint64_t min_size,
                             const std::string& header);

// Drops the resident pages of a read-only file mapping that lie wholly
// inside [begin, end) (neighbours may share the edge pages); they read back
// from the file if touched again.
void release_whole_pages(const void* begin, const void* end);

}  // namespace hubzoo
