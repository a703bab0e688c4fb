// tensor_file.cpp — inits and consts from .safetensors / .npy / .npz files (tensor_file.h).
#include "spec/tensor_file.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "io/atomic_file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "tensor/sha256.h"

namespace gr {

namespace {

enum class FileKind { Safetensors, Npy, Npz };

// One file, read and parsed once however many inits name it.
struct LoadedFile {
  FileKind kind = FileKind::Safetensors;
  std::vector<NamedTensor> tensors;  // npy: one, named after the stem
  std::vector<std::string> dtypes;   // as stored, one per tensor ("F64", "<f4", ...)
};

// Where one tensor comes from, and who asked (for messages).
struct Request {
  std::string file, tensor, pointer;
  bool transpose = false;
};

// "tensor \"W\" of dir/w.safetensors", or "the array of dir/w.npy" (a .npy file's one tensor).
std::string describe(const std::string& tensor, const std::string& path) {
  return tensor.empty() ? "the array of " + path : "tensor \"" + tensor + "\" of " + path;
}

std::string tensor_names(const LoadedFile& f) {
  std::string s;
  for (size_t i = 0; i < f.tensors.size() && i < 12; ++i) s += (s.empty() ? "" : ", ") + f.tensors[i].name;
  if (f.tensors.size() > 12) s += ", ... (" + std::to_string(f.tensors.size()) + " in all)";
  return s.empty() ? "none" : s;
}

// The dtype strings of a safetensors header, by tensor name (the reader converts to double and
// forgets them; it has already validated the header, so this parse cannot fail on a valid file).
std::map<std::string, std::string> safetensors_dtypes(const std::string& bytes) {
  std::map<std::string, std::string> out;
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), sizeof n);
  const auto header = nlohmann::ordered_json::parse(bytes.substr(8, static_cast<size_t>(n)));
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__") out[it.key()] = it.value().at("dtype").get<std::string>();
  return out;
}

class Loader {
 public:
  explicit Loader(Spec& spec) : spec_(spec) {}

  // The tensor of `r`, transposed when asked, as a row-major Tensor.
  Tensor load(const Request& r) {
    const std::string path = resolve(r.file);
    const LoadedFile& f = file(path, r);
    auto fail = [&](const std::string& what) -> InputError { return InputError(spec_.path, r.pointer, what); };
    const std::string label = describe(r.tensor, path);
    size_t index = f.tensors.size();
    if (f.kind == FileKind::Npy) {
      const std::string stem = std::filesystem::path(path).stem().string();
      if (!r.tensor.empty() && r.tensor != stem)
        throw fail(path + " is a .npy file: its one tensor is named after the file (\"" + stem + "\"), not \"" +
                   r.tensor + "\"; leave \"tensor\" out");
      index = 0;
    } else {
      if (r.tensor.empty())
        throw fail("\"tensor\" is required: which tensor of " + path + " (tensors: " + tensor_names(f) + ")");
      for (size_t i = 0; i < f.tensors.size(); ++i)
        if (f.tensors[i].name == r.tensor) index = i;
      if (index == f.tensors.size())
        throw fail(path + " has no tensor \"" + r.tensor + "\"" + did_you_mean(r.tensor, names(f)) +
                   " (tensors: " + tensor_names(f) + ")");
    }
    const std::string& dtype = f.dtypes[index];
    if (dtype != "F64" && dtype != "F32" && dtype != "<f8" && dtype != "<f4")
      throw fail(label + " has dtype " + dtype +
                 "; weights and consts must be float64 or float32 (F64/F32, <f8/<f4)");
    const Tensor& t = f.tensors[index].tensor;
    if (!r.transpose) return t;
    if (t.shape().rank() != 2)
      throw fail("\"transpose\" needs a 2-D tensor; " + label +
                 " has shape " + t.shape().str());
    const int64_t rows = t.shape()[0], cols = t.shape()[1];
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) v[static_cast<size_t>(j * rows + i)] = t.data()[i * cols + j];
    return Tensor(Shape{cols, rows}, std::move(v));
  }

 private:
  std::string resolve(const std::string& file) const {
    return (std::filesystem::path(spec_.dir) / file).lexically_normal().string();
  }

  static std::vector<std::string> names(const LoadedFile& f) {
    std::vector<std::string> out;
    for (const NamedTensor& t : f.tensors) out.push_back(t.name);
    return out;
  }

  const LoadedFile& file(const std::string& path, const Request& r) {
    if (auto it = files_.find(path); it != files_.end()) return *it->second;
    auto fail = [&](const std::string& what) -> InputError { return InputError(spec_.path, r.pointer, what); };
    const std::string ext = std::filesystem::path(path).extension().string();
    auto f = std::make_unique<LoadedFile>();
    if (ext == ".safetensors") f->kind = FileKind::Safetensors;
    else if (ext == ".npy") f->kind = FileKind::Npy;
    else if (ext == ".npz") f->kind = FileKind::Npz;
    else throw fail("\"" + r.file + "\": unknown tensor file type \"" + ext + "\" (known: .safetensors, .npy, .npz)");
    std::string bytes;
    try {
      bytes = read_file(path);
    } catch (const IoError& e) {
      throw fail("cannot read " + describe(r.tensor, path) + ": " + e.what());
    }
    try {
      switch (f->kind) {
        case FileKind::Safetensors: {
          SafetensorsFile st = parse_safetensors(bytes, path);
          const std::map<std::string, std::string> dtypes = safetensors_dtypes(bytes);
          for (NamedTensor& t : st.tensors) {
            f->dtypes.push_back(dtypes.at(t.name));
            f->tensors.push_back(std::move(t));
          }
          break;
        }
        case FileKind::Npy: {
          std::string descr;
          Tensor t = parse_npy(bytes, path, &descr);
          f->tensors.push_back({std::filesystem::path(path).stem().string(), std::move(t)});
          f->dtypes.push_back(descr);
          break;
        }
        case FileKind::Npz: f->tensors = parse_npz(bytes, path, &f->dtypes); break;
      }
    } catch (const InputError& e) {  // the reader's own place inside the file, behind the spec's
      throw fail("cannot load " + describe(r.tensor, path) + ": " + e.what());
    } catch (const nlohmann::ordered_json::exception& e) {
      throw fail("cannot load " + describe(r.tensor, path) + ": " + path + ": " + e.what());
    }
    spec_.tensor_files.push_back({path, sha256_hex(bytes)});
    return *files_.emplace(path, std::move(f)).first->second;
  }

  Spec& spec_;
  std::map<std::string, std::unique_ptr<LoadedFile>> files_;
};

void load_init(Loader& loader, InitSpec& init) {
  if (init.file.empty()) return;
  Tensor t = loader.load({init.file, init.tensor, init.pointer, init.transpose});
  init.file_shape.assign(t.shape().dims().begin(), t.shape().dims().end());
  init.values.assign(t.values().begin(), t.values().end());
}

std::string file_of(const JsonAt& j) {
  const std::string file = j.at("file").str();
  if (file.empty()) j.at("file").fail("expected a path to a .safetensors, .npy or .npz file");
  return file;
}

}  // namespace

InitSpec read_file_init(const JsonAt& j) {
  j.only_keys({"file", "tensor", "transpose"});
  InitSpec init;
  init.kind = InitSpec::Kind::Values;
  init.file = file_of(j);
  if (j.has("tensor")) init.tensor = j.at("tensor").str();
  if (j.has("transpose")) init.transpose = j.at("transpose").boolean();
  init.pointer = j.pointer();
  return init;
}

void read_file_const(const JsonAt& j, ConstSpec& c) {
  j.only_keys({"file", "tensor", "transpose", "shape"});
  c.file = file_of(j);
  if (j.has("tensor")) c.tensor = j.at("tensor").str();
  if (j.has("transpose")) c.transpose = j.at("transpose").boolean();
  c.shape.clear();
  if (j.has("shape")) c.shape = j.at("shape").integers(1, std::numeric_limits<int64_t>::max());  // checked on load
}

void load_tensor_files(Spec& spec) {
  Loader loader(spec);
  for (ParamSpec& p : spec.params) load_init(loader, p.init);
  for (NodeSpec& n : spec.graph) {
    if (n.kind == NodeSpec::Kind::Dense) {
      load_init(loader, n.w_init);
      load_init(loader, n.b_init);
    }
    for (LayerParamSpec& lp : n.layer_params) load_init(loader, lp.init);
  }
  for (ConstSpec& c : spec.consts) {
    if (c.file.empty()) continue;
    Tensor t = loader.load({c.file, c.tensor, c.pointer, c.transpose});
    const std::vector<int64_t> dims(t.shape().dims().begin(), t.shape().dims().end());
    if (!c.shape.empty() && c.shape != dims)
      throw InputError(spec.path, c.pointer + "/shape",
                       "shape " + Shape(std::span<const int64_t>(c.shape)).str() + " but " +
                           describe(c.tensor, (std::filesystem::path(spec.dir) / c.file).lexically_normal().string()) +
                           (c.transpose ? ", transposed," : "") + " has shape " + t.shape().str());
    c.shape = dims;
    c.values.assign(t.values().begin(), t.values().end());
  }
}

void release_tensor_values(Spec& spec) {
  auto release = [](std::vector<double>& v) { std::vector<double>().swap(v); };
  for (ParamSpec& p : spec.params) release(p.init.values);
  for (NodeSpec& n : spec.graph) {
    if (n.kind == NodeSpec::Kind::Dense) {
      release(n.w_init.values);
      release(n.b_init.values);
    }
    for (LayerParamSpec& lp : n.layer_params) release(lp.init.values);
  }
  for (ConstSpec& c : spec.consts) release(c.values);
  spec.values_released = true;
}

void check_file_init(const Spec& spec, const InitSpec& init, const Shape& shape, const std::string& param) {
  if (init.file.empty()) return;
  const Shape got{std::span<const int64_t>(init.file_shape)};
  if (got == shape) return;
  std::string hint;
  if (got.rank() == 2 && shape.rank() == 2 && got[0] == shape[1] && got[1] == shape[0])
    hint = init.transpose ? " (drop \"transpose\": the file already has gradrun's [in, out] layout)"
                          : " (PyTorch's [out, in] layout? add \"transpose\": true)";
  const std::string path = (std::filesystem::path(spec.dir) / init.file).lexically_normal().string();
  throw InputError(spec.path, init.pointer,
                   describe(init.tensor, path) + (init.transpose ? ", transposed," : "") +
                       " has shape " + got.str() + " but parameter \"" + param + "\" is " + shape.str() + hint);
}

}  // namespace gr
