// run_model.cpp — see run_model.h.
#include "train/run_model.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "spec/json_reader.h"
#include "spec/overrides.h"
#include "tensor/shape.h"
#include "tensor/sha256.h"

namespace gr {

namespace {

using Json = nlohmann::ordered_json;

// The entries of an array of objects without the keys that do not change a prediction.
Json without(const Json& list, std::initializer_list<const char*> keys) {
  Json out = Json::array();
  if (!list.is_array()) return out;
  for (Json item : list) {
    if (item.is_object())
      for (const char* k : keys) item.erase(k);
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace

std::string model_identity(const Spec& spec) {
  GR_ASSERT(!spec.values_released);  // the consts' values are part of the model
  Json doc;
  try {
    doc = Json::parse(spec.text);
  } catch (const Json::exception&) {  // load_spec parsed it already
    doc = Json::object();
  }
  Json id = Json::object();
  id["graph"] = without(doc.value("graph", Json::array()), {"init", "trainable"});
  id["params"] = without(doc.value("params", Json::array()), {"init", "trainable"});
  id["loss"] = spec.loss;
  id["inputs"] = doc.contains("data") && doc["data"].is_object() ? doc["data"].value("inputs", Json::array()) : Json::array();
  Json consts = Json::array();
  for (const ConstSpec& c : spec.consts)
    consts.push_back({{"name", c.name}, {"shape", c.shape},
                      {"values_sha256", sha256_hex(std::string(reinterpret_cast<const char*>(c.values.data()), c.values.size() * sizeof(double)))}});
  id["consts"] = consts;
  return sorted_keys(id).dump();
}

std::string model_difference(const std::string& trained, const std::string& now, std::string* pointer) {
  if (pointer) *pointer = "";
  Json a, b;
  try {
    a = Json::parse(trained);
    b = Json::parse(now);
  } catch (const Json::exception&) {
    return trained == now ? "" : "the weights' model identity is unreadable";
  }
  const Json patch = Json::diff(a, b);
  if (patch.empty()) return "";
  std::string path = patch[0].value("path", "");
  const Json::json_pointer p(path);
  const std::string was = a.contains(p) ? a.at(p).dump() : "absent";
  const std::string is = b.contains(p) ? b.at(p).dump() : "absent";
  // Back to a place in the spec: inputs live under /data, a const's digest names the const.
  std::string place = path;
  if (place.rfind("/inputs", 0) == 0) place = "/data" + place;
  if (place.rfind("/consts/", 0) == 0 && place.find("/values_sha256") != std::string::npos) place = place.substr(0, place.rfind('/'));
  if (pointer) *pointer = place == "/loss" ? "/loss" : place;
  const std::string what = path.find("values_sha256") != std::string::npos ? "the values differ" : "was " + was + ", now " + is;
  return place + ": " + what;
}

void write_run_spec(const std::string& dir, const Spec& spec) { write_file_atomic(dir + "/spec.json", spec.text); }

bool is_run_folder(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::exists(std::filesystem::path(path) / "spec.json", ec);
}

Spec load_run_spec(const std::string& dir, const std::vector<std::string>& sets) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "spec.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(dir, "",
                     "this folder holds no spec.json (not a run folder, or a run from before gradrun kept its spec); name the "
                     "spec file too");
  SpecOrigin origin{fs::path(path).parent_path().string(), "spec"};
  Json run = Json::object();
  if (fs::exists(fs::path(dir) / "run.json", ec)) {
    try {
      run = Json::parse(read_file((fs::path(dir) / "run.json").string()));
      if (run.contains("spec_dir") && run["spec_dir"].is_string()) origin.dir = run["spec_dir"].get<std::string>();
      if (run.contains("name") && run["name"].is_string()) origin.default_name = run["name"].get<std::string>();
      if (run.contains("spec") && run["spec"].is_string()) origin.source = run["spec"].get<std::string>();
    } catch (const Json::exception&) {  // an unreadable run.json: the spec still loads, paths from the folder
    }
  }
  const std::string text = sets.empty() ? read_file(path) : apply_overrides(read_file(path), sets, path);
  Spec s = parse_spec(text, path, origin);
  s.overrides = sets;
  // train's --seed and --epochs are not in the text (its sha256 stays the file's): run.json has them.
  if (run.contains("seed") && run["seed"].is_number_unsigned()) s.seed = run["seed"].get<uint64_t>();
  if (run.contains("target_epochs") && run["target_epochs"].is_number_integer() && run["target_epochs"].get<int64_t>() > 0)
    s.train.epochs = run["target_epochs"].get<int64_t>();
  return s;
}

std::string choose_weights(const std::string& weights_or_run_dir, const std::string& which, std::string* note) {
  namespace fs = std::filesystem;
  if (note) note->clear();
  std::error_code ec;
  if (!fs::is_directory(weights_or_run_dir, ec)) return weights_or_run_dir;
  const std::string final_path = (fs::path(weights_or_run_dir) / "weights.safetensors").string();
  const std::string best_path = (fs::path(weights_or_run_dir) / "weights.best.safetensors").string();
  if (which != "final" && fs::exists(best_path, ec)) {
    if (note) *note = "weights: " + best_path + " (early stopping's best epoch; --which final for the last epoch's)";
    return best_path;
  }
  return final_path;
}

RunEngine read_run_engine(const std::string& run_dir) {
  RunEngine e;
  const std::string path = (std::filesystem::path(run_dir) / "run.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return e;
  try {
    const Json run = Json::parse(read_file(path));
    if (run.contains("device") && run["device"].is_string()) e.device = run["device"].get<std::string>();
    if (run.contains("dtype") && run["dtype"].is_string()) e.dtype = run["dtype"].get<std::string>();
    if (run.contains("fused") && run["fused"].is_boolean()) e.fused = run["fused"].get<bool>();
  } catch (const Json::exception&) {  // unreadable: the resume's own checks will say so
  }
  return e;
}

std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("/._-+=:,@%").find(c) != std::string_view::npos;
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace gr
