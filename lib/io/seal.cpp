#include "io/seal.h"

#include <cstdint>

#include "io/errors.h"
#include "tensor/sha256.h"

namespace gr {

namespace {

void add_text(Sha256& h, const std::string& s) {
  const uint64_t n = s.size();
  h.update(&n, sizeof n);
  h.update(s);
}

void add_meta(Sha256& h, const std::map<std::string, std::string>& metadata) {
  for (const auto& [k, v] : metadata) {
    if (k == kSealKey) continue;
    add_text(h, k);
    add_text(h, v);
  }
}

void add_tensor(Sha256& h, const std::string& name, const ConstTensorView& t) {
  add_text(h, name);
  const uint64_t rank = static_cast<uint64_t>(t.shape.rank());
  h.update(&rank, sizeof rank);
  for (uint64_t d = 0; d < rank; ++d) {
    const int64_t dim = t.shape[static_cast<int>(d)];
    h.update(&dim, sizeof dim);
  }
  h.update(t.data, static_cast<size_t>(t.shape.numel()) * sizeof(double));
}

}  // namespace

std::string seal_digest(const StTensorList& tensors, const std::map<std::string, std::string>& metadata) {
  Sha256 h;
  add_meta(h, metadata);
  for (const auto& [name, view] : tensors) add_tensor(h, name, view);
  return h.hex();
}

std::string seal_digest(const SafetensorsFile& f) {
  Sha256 h;
  add_meta(h, f.metadata);
  for (const NamedTensor& t : f.tensors) add_tensor(h, t.name, t.tensor.view());
  return h.hex();
}

void write_sealed_safetensors(const std::string& path, const StTensorList& tensors, std::map<std::string, std::string> metadata) {
  metadata[kSealKey] = seal_digest(tensors, metadata);
  write_safetensors(path, tensors, metadata, DType::F64);
}

bool check_seal(const SafetensorsFile& f, const std::string& path, bool required) {
  const auto it = f.metadata.find(kSealKey);
  if (it == f.metadata.end()) {
    if (required) throw InputError(path, "__metadata__", std::string("the file's seal (\"") + kSealKey + "\") is missing: the file is damaged");
    return false;
  }
  const std::string now = seal_digest(f);
  if (now != it->second)
    throw InputError(path, "__metadata__",
                     "the file's content does not match its seal (sha256 " + it->second.substr(0, 12) + "…, content " + now.substr(0, 12) +
                         "…): the file is damaged");
  return true;
}

SafetensorsFile read_sealed_weights(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  const auto format = f.metadata.find("format");
  check_seal(f, path, format != f.metadata.end() && format->second.rfind("gradrun-weights", 0) == 0);
  return f;
}

}  // namespace gr
