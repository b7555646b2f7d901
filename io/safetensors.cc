#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/json.h"
#include "io/mapped_file.h"

namespace hubzoo {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;  // as the reference implementation

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses one header entry; `where` is "<file>: tensor 'name'".
TensorInfo parse_entry(const nlohmann::json& v, const std::string& where, uint64_t buffer_size) {
  if (!v.is_object())
    throw FormatError(where + ": entry must be an object, got " + json_excerpt(v));
  TensorInfo info;

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) throw FormatError(where + ": missing string 'dtype'");
  try {
    info.dtype = parse_dtype(dt->get<std::string>());
  } catch (const FormatError& e) {
    throw FormatError(where + ": " + e.what());
  }

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) {
    throw FormatError(where + ": 'shape' must be a list of non-negative integers");
  }
  // numel, rejecting shapes whose non-zero dims multiply past int64 (so that
  // num_elements() never overflows on a validated view).
  uint64_t numel = 1, nonzero_product = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw FormatError(where + ": 'shape' must be a list of non-negative integers, got " +
                        json_excerpt(*sh));
    }
    const uint64_t x = d.get<uint64_t>();
    info.shape.push_back(static_cast<int64_t>(x));
    numel *= x;
    if (x == 0) continue;
    if (nonzero_product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / x) {
      overflow = true;
    }
    nonzero_product *= x;
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    throw FormatError(where + ": 'data_offsets' must be [begin, end] (non-negative integers)");
  }
  info.begin = (*off)[0].get<uint64_t>();
  info.end = (*off)[1].get<uint64_t>();
  if (info.begin > info.end) {
    throw FormatError(where + ": data_offsets begin " + std::to_string(info.begin) + " > end " +
                      std::to_string(info.end));
  }
  if (info.end > buffer_size) {
    throw FormatError(where + ": data_offsets end " + std::to_string(info.end) +
                      " is past the data buffer (" + std::to_string(buffer_size) +
                      " bytes; file truncated?)");
  }
  const uint64_t esize = dtype_size(info.dtype);
  if (overflow || numel > std::numeric_limits<uint64_t>::max() / esize ||
      numel * esize != info.end - info.begin) {
    throw FormatError(where + ": " + std::to_string(info.end - info.begin) + " bytes but shape " +
                      shape_str(info.shape) + " of " + std::string(dtype_name(info.dtype)) +
                      " needs " +
                      (overflow ? std::string("more than 2^63") : std::to_string(numel * esize)));
  }
  return info;
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const fs::path& path) {
  const std::string p = path.string();
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;

  const FileMapping m = map_regular_file(path, 8, "8-byte safetensors header length");
  // From here the destructor unmaps on any throw.
  f->map_ = m.data;
  f->map_size_ = m.size;
  const uint64_t size = m.size;

  const uint64_t header_len = read_le64(f->map_);
  if (header_len > kMaxHeaderBytes) {
    throw FormatError(p + ": header length " + std::to_string(header_len) +
                      " exceeds the 100 MB limit");
  }
  if (header_len > size - 8) {
    throw FormatError(p + ": header length " + std::to_string(header_len) +
                      " is past the end of the file (" + std::to_string(size) + " bytes)");
  }
  const uint64_t buffer_size = size - 8 - header_len;
  f->data_ = f->map_ + 8 + header_len;

  // A header nests 3 levels ({name: {"shape": [...]}}); 16 leaves room and
  // keeps a deep array from reaching anything that recurses.
  const nlohmann::json header =
      parse_json(std::string_view(reinterpret_cast<const char*>(f->map_ + 8), header_len),
                 p + " (JSON header)", {/*max_depth=*/16, kMaxHeaderBytes});
  if (!header.is_object()) throw FormatError(p + ": header is not a JSON object");

  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw FormatError(p + ": __metadata__ must be a string->string map");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) {
          throw FormatError(p + ": __metadata__ value of '" + k + "' must be a string");
        }
        f->metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    f->tensors_[name] = parse_entry(v, p + ": tensor '" + name + "'", buffer_size);
  }

  // No two tensors may share bytes: sort by begin and compare neighbours.
  std::vector<std::pair<const std::string*, const TensorInfo*>> order;
  for (const auto& [name, info] : f->tensors_) {
    if (info.end > info.begin) order.emplace_back(&name, &info);
  }
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i].second->begin < order[i - 1].second->end) {
      throw FormatError(p + ": tensors '" + *order[i - 1].first + "' and '" + *order[i].first +
                        "' overlap in the data buffer");
    }
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

TensorView SafetensorsFile::view(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw TensorMappingError(path_.string() + ": no tensor '" + name + "'");
  }
  TensorView v;
  v.dtype = it->second.dtype;
  v.shape = it->second.shape;
  v.data = data_ + it->second.begin;
  return v;
}

void SafetensorsFile::release(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw TensorMappingError(path_.string() + ": no tensor '" + name + "'");
  }
  release_whole_pages(data_ + it->second.begin, data_ + it->second.end);
}

// ---- Checkpoint ----------------------------------------------------------------

Checkpoint Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw FileError(dir.string() + ": not a directory");

  Checkpoint ck;
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;  // from the index, if used

  if (fs::exists(single, ec)) {
    ck.files_.push_back(SafetensorsFile::open(single));
  } else if (fs::exists(index, ec)) {
    const nlohmann::json j = read_json_file(index);
    auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (!j.is_object() || wm == j.end() || !wm->is_object()) {
      throw FormatError(index.string() + ": missing object 'weight_map'");
    }
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : wm->items()) {
      if (!shard.is_string()) {
        throw FormatError(index.string() + ": weight_map entry '" + tensor +
                          "' must be a file name");
      }
      const fs::path rel = shard.get<std::string>();
      if (rel.empty() || rel.is_absolute() ||
          std::any_of(rel.begin(), rel.end(), [](const fs::path& c) { return c == ".."; })) {
        throw FormatError(index.string() + ": weight_map entry '" + tensor +
                          "' names a shard outside the directory: " + rel.string());
      }
      weight_map[tensor] = rel.string();
      shards.insert(rel.string());
    }
    for (const auto& shard : shards) {
      const fs::path sp = dir / shard;
      if (!fs::is_regular_file(sp, ec)) {
        throw FileError(sp.string() + ": shard listed in " + index.string() + " is missing");
      }
      ck.files_.push_back(SafetensorsFile::open(sp));
    }
  } else {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) {
        found.push_back(e.path());
      }
    }
    if (ec) throw FileError(dir.string() + ": cannot list directory: " + ec.message());
    std::sort(found.begin(), found.end());
    for (const auto& sp : found) ck.files_.push_back(SafetensorsFile::open(sp));
  }
  if (ck.files_.empty()) throw FileError(dir.string() + ": no *.safetensors files");

  for (const auto& f : ck.files_) {
    for (const auto& [name, info] : f->tensors()) {
      auto [it, inserted] = ck.where_.emplace(name, f.get());
      if (!inserted) {
        throw FormatError("tensor '" + name + "' appears in both " + it->second->path().string() +
                          " and " + f->path().string());
      }
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    auto it = ck.where_.find(tensor);
    const fs::path sp = dir / shard;
    if (it == ck.where_.end() || it->second->path() != sp) {
      throw FormatError(sp.string() + ": lacks tensor '" + tensor + "' that " + index.string() +
                        " places there");
    }
  }
  return ck;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size() + gguf_where_.size());
  for (const auto& [name, f] : where_) out.push_back(name);
  for (const auto& [name, e] : gguf_where_) out.push_back(name);
  return out;
}

bool Checkpoint::contains(const std::string& name) const {
  return where_.count(name) != 0 || gguf_where_.count(name) != 0;
}

const fs::path& Checkpoint::file_of(const std::string& name) const {
  if (gguf_where_.count(name)) return gguf_path();
  auto it = where_.find(name);
  if (it == where_.end()) throw TensorMappingError("checkpoint has no tensor '" + name + "'");
  return it->second->path();
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  if (auto g = gguf_where_.find(name); g != gguf_where_.end()) return g->second.info;
  auto it = where_.find(name);
  if (it == where_.end()) throw TensorMappingError("checkpoint has no tensor '" + name + "'");
  return it->second->tensors().at(name);
}

TensorView Checkpoint::view(const std::string& name) const {
  if (auto g = gguf_where_.find(name); g != gguf_where_.end()) return gguf_view(g->second);
  auto it = where_.find(name);
  if (it == where_.end()) throw TensorMappingError("checkpoint has no tensor '" + name + "'");
  return it->second->view(name);
}

void Checkpoint::release(const std::string& name) const {
  if (auto g = gguf_where_.find(name); g != gguf_where_.end()) return gguf_release(g->second);
  auto it = where_.find(name);
  if (it == where_.end()) throw TensorMappingError("checkpoint has no tensor '" + name + "'");
  it->second->release(name);
}

// ---- writer --------------------------------------------------------------------

void write_safetensors(const fs::path& path, const std::map<std::string, TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {  // std::map: name order
    if (name == "__metadata__") throw InvalidArgument("tensor name '__metadata__' is reserved");
    for (int64_t d : t.shape) {
      if (d < 0) throw InvalidArgument("tensor '" + name + "': negative dimension");
    }
    const uint64_t n = t.nbytes();
    if (n && !t.data) throw InvalidArgument("tensor '" + name + "': null data");
    header[name] = {{"dtype", std::string(dtype_name(t.dtype))},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data buffer 8-byte aligned

  // Write beside the target and rename, so a failure leaves nothing half-written.
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw FileError(tmp.string() + ": cannot create file");
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, t] : tensors) {
      out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes()));
    }
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw FileError(tmp.string() + ": write failed");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw FileError(path.string() + ": cannot rename from " + tmp.string());
  }
}

}  // namespace hubzoo
