#include "layers/weights.h"

#include "base/error.h"

namespace hubzoo {

WeightLoader::WeightLoader(std::shared_ptr<const Checkpoint> checkpoint, Numerics numerics)
    : ckpt_(std::move(checkpoint)), numerics_(numerics) {
  for (const auto& name : ckpt_->names()) used_[name] = false;
}

bool WeightLoader::contains(const std::string& name) const { return used_.count(name) != 0; }

const TensorInfo& WeightLoader::claim(const std::string& name, const Shape& shape) {
  auto it = used_.find(name);
  if (it == used_.end()) {
    throw TensorMappingError("checkpoint is missing tensor '" + name + "' (expected shape " +
                             shape_str(shape) + ")");
  }
  if (it->second) throw TensorMappingError("tensor '" + name + "' is used twice");
  const TensorInfo& info = ckpt_->info(name);
  const std::string file = ckpt_->file_of(name).string();
  if (info.shape != shape) {
    throw TensorMappingError(file + ": tensor '" + name + "' has shape " + shape_str(info.shape) +
                             ", the config implies " + shape_str(shape));
  }
  if (!is_float_weight_dtype(info.dtype)) {
    throw TensorMappingError(file + ": tensor '" + name + "' has dtype " +
                             std::string(dtype_name(info.dtype)) +
                             "; weights must be F32, BF16 or F16");
  }
  it->second = true;
  return info;
}

FloatWeights WeightLoader::take(const std::string& name, const Shape& shape) {
  const TensorInfo& info = claim(name, shape);
  TensorView v = ckpt_->view(name);
  FloatWeights w;
  w.size_ = v.numel();
  if (info.dtype == DType::F32 && !numerics_.bf16) {
    w.data_ = static_cast<const float*>(v.data);
  } else {
    w.owned_.resize(w.size_);
    convert_to_f32(info.dtype, v.data, w.owned_.data(), w.size_);
    numerics_.round_stored(w.owned_.data(), w.size_);
    w.data_ = w.owned_.data();
  }
  return w;
}

PackedMatrix WeightLoader::take_packed(const std::string& name, int64_t n, int64_t k) {
  return take_packed_as(name, n, k, numerics_.bf16);
}

PackedMatrix WeightLoader::take_packed_fp32(const std::string& name, int64_t n, int64_t k) {
  return take_packed_as(name, n, k, /*bf16=*/false);
}

PackedMatrix WeightLoader::take_packed_as(const std::string& name, int64_t n, int64_t k,
                                          bool bf16) {
  const TensorInfo& info = claim(name, {n, k});
  TensorView v = ckpt_->view(name);
  const auto pack = bf16 ? pack_weights_bf16 : pack_weights;
  PackedMatrix packed;
  if (info.dtype == DType::F32) {
    packed = pack(static_cast<const float*>(v.data), n, k);
  } else if (info.dtype == DType::BF16) {  // widened while packing: no float32 copy
    packed = pack_weights_concat({{nullptr, n, static_cast<const uint16_t*>(v.data)}}, k, bf16);
  } else {
    std::vector<float> tmp(static_cast<size_t>(n * k));
    convert_to_f32(info.dtype, v.data, tmp.data(), tmp.size());
    packed = pack(tmp.data(), n, k);
  }
  ckpt_->release(name);  // the packed copy is the only one kept resident
  return packed;
}

PackedMatrix WeightLoader::take_packed_concat(const std::vector<std::string>& names,
                                              const std::vector<int64_t>& ns, int64_t k) {
  if (names.size() != ns.size())
    throw InvalidArgument("take_packed_concat: names and sizes differ");
  std::vector<std::vector<float>> converted(names.size());
  std::vector<WeightRows> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorInfo& info = claim(names[i], {ns[i], k});
    TensorView v = ckpt_->view(names[i]);
    if (info.dtype == DType::F32) {
      parts.push_back({static_cast<const float*>(v.data), ns[i]});
    } else if (info.dtype == DType::BF16) {
      parts.push_back({nullptr, ns[i], static_cast<const uint16_t*>(v.data)});
    } else {
      converted[i].resize(static_cast<size_t>(ns[i] * k));
      convert_to_f32(info.dtype, v.data, converted[i].data(), converted[i].size());
      parts.push_back({converted[i].data(), ns[i]});
    }
  }
  PackedMatrix packed = pack_weights_concat(parts, k, numerics_.bf16);
  for (const auto& name : names) ckpt_->release(name);  // the packed copy is the only one kept
  return packed;
}

std::vector<PackedMatrix> WeightLoader::take_packed_stack(const std::string& name, int64_t count,
                                                          int64_t n, int64_t k, int64_t parts) {
  if (parts <= 0 || n % parts != 0) {
    throw TensorMappingError("tensor '" + name + "': " + std::to_string(n) +
                             " rows do not split into " + std::to_string(parts) + " parts");
  }
  const TensorInfo& info = claim(name, {count, n, k});
  TensorView v = ckpt_->view(name);
  const auto pack = numerics_.bf16 ? pack_weights_bf16 : pack_weights;
  const int64_t rows = n / parts;
  const size_t block = static_cast<size_t>(rows * k);
  std::vector<float> tmp(block);
  std::vector<PackedMatrix> out;
  out.reserve(count * parts);
  for (int64_t b = 0; b < count * parts; ++b) {
    const char* src = static_cast<const char*>(v.data) + b * block * dtype_size(info.dtype);
    convert_to_f32(info.dtype, src, tmp.data(), block);
    out.push_back(pack(tmp.data(), rows, k));
  }
  ckpt_->release(name);
  return out;
}

void WeightLoader::ignore(const std::string& name, const std::string& reason) {
  auto it = used_.find(name);
  if (it == used_.end()) return;
  it->second = true;
  ignored_[name] = reason;
}

void WeightLoader::finish() const {
  std::string unused;
  int count = 0;
  for (const auto& [name, used] : used_) {
    if (used) continue;
    if (count++ < 8)
      unused +=
          (unused.empty() ? "" : ", ") + ckpt_->file_of(name).filename().string() + ":" + name;
  }
  if (count > 0) {
    throw TensorMappingError("checkpoint has " + std::to_string(count) +
                             " tensor(s) the model does not use: " + unused +
                             (count > 8 ? ", ..." : ""));
  }
}

}  // namespace hubzoo
