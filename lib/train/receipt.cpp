// receipt.cpp — see receipt.h.
#include "train/receipt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "io/safetensors.h"
#include "tensor/sha256.h"
#include "tensor/same_bits.h"

#ifndef GR_BUILD_FLAGS
#define GR_BUILD_FLAGS "unknown"
#endif
#include "gr_git_commit.h"  // GR_GIT_COMMIT, written at build time (cmake/git_commit.cmake)

namespace gr {

namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kWeightFiles[] = {"weights.safetensors", "weights.best.safetensors"};

std::string table_digest(const DataTable& t) {
  Sha256 h;
  for (const Tensor& x : t.tensors) h.update(x.data(), static_cast<size_t>(x.numel()) * sizeof(double));
  return h.hex();
}

bool exists(const std::string& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    std::string line = s.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
    start = end + 1;
  }
  return out;
}

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t c = line.find(',', start);
    out.push_back(line.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) return out;
    start = c + 1;
  }
}

// The digest of a weights file's parameters in the program's registration order (weights_sha256).
std::string weights_file_digest(const std::string& path, const Program& program) {
  const SafetensorsFile f = read_safetensors(path);
  Sha256 h;
  for (const ProgramParam& pp : program.params)
    if (const Tensor* t = f.find(pp.name)) hash_doubles(h, t->data(), static_cast<size_t>(t->numel()));
  return h.hex();
}

std::string isa_level() {
  std::string built =
#if defined(__AVX512F__)
      "avx512f";
#elif defined(__AVX2__) && defined(__FMA__)
      "x86-64-v3 (avx2, fma)";
#elif defined(__x86_64__)
      "x86-64 baseline";
#elif defined(__aarch64__)
      "aarch64";
#else
      "portable";
#endif
  std::string cpu;
#if defined(__x86_64__)
  __builtin_cpu_init();
  cpu = __builtin_cpu_supports("avx512f") ? "avx512f" : __builtin_cpu_supports("avx2") ? "avx2" : "sse2";
#else
  cpu = "unknown";
#endif
  return "built for " + built + ", running on a CPU with " + cpu;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// "abs 1.5e-3, rel 2.1e-4" of two numbers.
std::string by_how_much(double want, double got) {
  const double d = std::fabs(got - want);
  char buf[96];
  std::snprintf(buf, sizeof buf, "abs %.3g, rel %.3g", d, d / std::max(std::fabs(want), 1e-300));
  return buf;
}

Json parse_receipt(const Golden& g) {
  try {
    return Json::parse(g.receipt_json);
  } catch (const Json::exception& e) {
    throw InputError(g.path, "", std::string("not a gradrun receipt (malformed JSON: ") + e.what() + ")");
  }
}

bool parse_number(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace

bool Tolerance::close(double want, double got) const {
  if (bitwise()) return same_bits(want, got);
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  return std::fabs(got - want) <= std::max(atol, 0.0) + std::max(rtol, 0.0) * std::fabs(want);
}

bool Tolerance::same_row(const std::string& want, const std::string& got) const {
  if (want == got) return true;
  if (bitwise()) return false;
  const std::vector<std::string> w = split_commas(want), g = split_commas(got);
  if (w.size() != g.size()) return false;
  for (size_t i = 0; i < w.size(); ++i) {
    double a = 0, b = 0;
    if (w[i] == g[i]) continue;
    if (!parse_number(w[i], a) || !parse_number(g[i], b) || !close(a, b)) return false;
  }
  return true;
}

std::string Tolerance::describe() const {
  if (bitwise()) return "bitwise";
  char buf[96];
  std::snprintf(buf, sizeof buf, "within rtol %g, atol %g", std::max(rtol, 0.0), std::max(atol, 0.0));
  return buf;
}

DataDigests data_digests(const Model& model) {
  DataDigests d;
  d.train_rows = model.data().train.rows;
  d.validation_rows = model.data().validation.rows;
  d.train_sha256 = table_digest(model.data().train);
  d.validation_sha256 = table_digest(model.data().validation);
  return d;
}

std::string metrics_without_seconds(const std::string& metrics_csv) {
  const std::vector<std::string> lines = split_lines(metrics_csv);
  if (lines.empty()) return "";
  const std::vector<std::string> header = split_commas(lines[0]);
  size_t drop = header.size();
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == "seconds") drop = i;
  std::string out;
  for (const std::string& line : lines) {
    const std::vector<std::string> cells = split_commas(line);
    bool first = true;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i == drop) continue;
      out += (first ? "" : ",") + cells[i];
      first = false;
    }
    out += "\n";
  }
  return out;
}

std::string render_receipt(const ReceiptInput& in) {
  const Model& model = *in.model;
  const DataDigests d = data_digests(model);
  Json files = Json::object();
  const std::string loss = in.out_dir + "/loss.csv", metrics = in.out_dir + "/metrics.csv";
  if (exists(loss)) files["loss.csv"] = sha256_hex(read_file(loss));
  if (exists(metrics)) files["metrics.csv"] = sha256_hex(metrics_without_seconds(read_file(metrics)));
  for (const char* w : kWeightFiles)
    if (exists(in.out_dir + "/" + w)) files[w] = weights_file_digest(in.out_dir + "/" + w, model.program());
  Json r = {
      {"gradrun_receipt", 1},
      {"status", in.status},
      {"steps", in.steps},
      {"epochs", in.epochs},
      {"spec_sha256", model.spec().sha256},
      {"model_sha256", sha256_hex(model.identity())},
      {"run_sha256", in.run_sha256},
      {"data", {{"train_rows", d.train_rows}, {"train_sha256", d.train_sha256},
                {"validation_rows", d.validation_rows}, {"validation_sha256", d.validation_sha256}}},
      {"files", files},
      {"provenance", {{"gradrun", "0.1.0"}, {"compiler", std::string("gcc ") + __VERSION__}, {"flags", GR_BUILD_FLAGS},
                      {"isa", isa_level()}, {"git_commit", GR_GIT_COMMIT}, {"engine", in.engine}, {"dtype", in.dtype},
                      {"fused", in.fused}, {"threads", in.threads}}},
  };
  return r.dump(2) + "\n";
}

Golden read_golden(const std::string& path) {
  Golden g;
  g.path = path;
  std::error_code ec;
  std::string loss_path;
  if (fs::is_directory(path, ec)) {
    g.folder = path;
    if (exists(path + "/receipt.json")) g.receipt_json = read_file(path + "/receipt.json");
    loss_path = path + "/loss.csv";
    if (!exists(loss_path) && g.receipt_json.empty())
      throw InputError(path, "", "this folder holds neither receipt.json nor loss.csv: not a run to expect");
  } else if (fs::path(path).extension() == ".json") {
    g.receipt_json = read_file(path);
    g.folder = fs::path(path).parent_path().string();
    if (g.folder.empty()) g.folder = ".";
    loss_path = g.folder + "/loss.csv";
  } else {
    loss_path = path;
  }
  if (!g.receipt_json.empty()) {
    const Json r = parse_receipt(g);
    if (!r.is_object() || !r.contains("gradrun_receipt")) throw InputError(path, "", "not a gradrun receipt (no \"gradrun_receipt\")");
  }
  if (!loss_path.empty() && (loss_path == path || exists(loss_path))) {
    std::vector<std::string> rows = split_lines(read_file(loss_path));
    if (rows.empty() || rows[0] != "step,epoch,loss")
      throw InputError(loss_path, "line 1", "not a loss log (expected the header step,epoch,loss)");
    rows.erase(rows.begin());
    g.loss_rows = std::move(rows);
  }
  return g;
}

std::string expect_inputs_difference(const Golden& g, const Model& model) {
  if (g.receipt_json.empty()) return "";
  const Json r = parse_receipt(g);
  const DataDigests d = data_digests(model);
  const Json& rd = r.value("data", Json::object());
  for (const auto& [part, rows, sha] : {std::tuple<const char*, int64_t, std::string>{"train", d.train_rows, d.train_sha256},
                                        {"validation", d.validation_rows, d.validation_sha256}}) {
    const std::string key = std::string(part) + "_sha256";
    if (rd.value(key, std::string()) != sha)
      return std::string("the ") + (std::string(part) == "train" ? "training" : "validation") + " rows differ (" +
             std::to_string(rows) + " rows, sha256 " + sha.substr(0, 12) + "…; the golden's " +
             std::to_string(rd.value(std::string(part) + "_rows", int64_t{-1})) + " rows, " +
             rd.value(key, std::string("?")).substr(0, 12) + "…): the data file or its split changed";
  }
  if (r.value("model_sha256", std::string()) != sha256_hex(model.identity()))
    return "the model differs (graph, parameters, consts or input bindings: its identity's sha256 is not the golden's)";
  if (r.value("spec_sha256", std::string()) != model.spec().sha256)
    return "the spec differs (its resolved text's sha256 " + model.spec().sha256.substr(0, 12) + "… is not the golden's " +
           r.value("spec_sha256", std::string("?")).substr(0, 12) + "…: optimizer, seed, batching, metrics or another field)";
  return "";
}

std::string describe_loss_difference(int64_t step, const std::string& expected_row, const std::string& got_row) {
  const std::vector<std::string> w = split_commas(expected_row), g = split_commas(got_row);
  std::string s = "at step " + std::to_string(step) + (g.size() > 1 ? " (epoch " + g[1] + ")" : "") + ": expected " +
                  (w.size() > 2 ? w[2] : expected_row) + ", got " + (g.size() > 2 ? g[2] : got_row);
  if (w.size() > 2 && g.size() > 2) {
    try {
      s += " (" + by_how_much(std::stod(w[2]), std::stod(g[2])) + ")";
    } catch (const std::exception&) {
    }
  }
  return s;
}

std::string expect_outputs_difference(const Golden& g, const std::string& out_dir, std::vector<std::string>& notes,
                                      const Tolerance& tol) {
  if (g.receipt_json.empty()) return "";
  const Json r = parse_receipt(g);
  const Json want_files = r.value("files", Json::object());
  Json mine = Json::object();
  try {
    mine = Json::parse(read_file(out_dir + "/receipt.json"));
  } catch (const Json::exception&) {
    return "this run's receipt.json is unreadable";
  }
  const Json got_files = mine.value("files", Json::object());
  auto digest_differs = [&](const char* f) {
    return want_files.contains(f) && (!got_files.contains(f) || got_files[f] != want_files[f]);
  };
  // loss.csv: compared step by step while training when the golden has one; else by digest here.
  if (g.loss_rows.empty() && digest_differs("loss.csv"))
    return "loss.csv differs (its sha256 is not the golden receipt's)" + std::string(tol.bitwise() ? "" : "; a tolerance needs the golden's loss.csv");
  // metrics.csv by epoch and column (the golden folder's file), else by digest.
  if (digest_differs("metrics.csv")) {
    const std::string want_metrics = g.folder + "/metrics.csv", got_metrics = out_dir + "/metrics.csv";
    if (g.folder.empty() || !exists(want_metrics) || !exists(got_metrics))
      return "metrics.csv differs (its sha256, seconds aside, is not the golden receipt's)" +
             std::string(tol.bitwise() ? "" : "; a tolerance needs the golden's metrics.csv");
    const std::vector<std::string> a = split_lines(metrics_without_seconds(read_file(want_metrics)));
    const std::vector<std::string> b = split_lines(metrics_without_seconds(read_file(got_metrics)));
    const std::vector<std::string> header = a.empty() ? std::vector<std::string>{} : split_commas(a[0]);
    for (size_t i = 1; i < std::min(a.size(), b.size()); ++i) {
      if (tol.same_row(a[i], b[i])) continue;
      const std::vector<std::string> x = split_commas(a[i]), y = split_commas(b[i]);
      for (size_t c = 0; c < std::min(x.size(), y.size()); ++c) {
        double xa = 0, yb = 0;
        if (x[c] == y[c] || (parse_number(x[c], xa) && parse_number(y[c], yb) && tol.close(xa, yb))) continue;
        std::string how;
        try {
          how = " (" + by_how_much(std::stod(x[c]), std::stod(y[c])) + ")";
        } catch (const std::exception&) {
        }
        return "metrics.csv differs at epoch " + y[0] + ": " + (c < header.size() ? header[c] : "column " + std::to_string(c)) +
               " expected " + x[c] + ", got " + y[c] + how;
      }
    }
    if (a.size() != b.size())
      return "metrics.csv has " + std::to_string(b.size() - 1) + " epochs, the golden's " + std::to_string(a.size() - 1);
  }
  // The weights: per parameter, max abs and rel difference (the golden folder's file), else by digest.
  for (const char* w : kWeightFiles) {
    if (!digest_differs(w)) continue;
    if (!got_files.contains(w)) return std::string(w) + " is missing (the golden run wrote one)";
    const std::string got_path = out_dir + "/" + w, want_path = g.folder + "/" + w;
    if (g.folder.empty() || !exists(want_path)) return std::string(w) + " differs (its sha256 is not the golden receipt's)";
    const SafetensorsFile want = read_safetensors(want_path), got = read_safetensors(got_path);
    std::string diffs;
    int differing = 0;
    for (const auto& [name, t] : want.tensors) {
      const Tensor* o = got.find(name);
      if (!o || o->numel() != t.numel()) return std::string(w) + ": parameter " + name + " is missing or of another shape";
      if (first_different({t.data(), static_cast<size_t>(t.numel())}, {o->data(), static_cast<size_t>(o->numel())}) < 0) continue;
      double max_abs = 0, max_rel = 0;
      bool within = true;
      for (int64_t i = 0; i < t.numel(); ++i) {
        const double d = std::fabs(t[i] - (*o)[i]);
        max_abs = std::max(max_abs, d);
        max_rel = std::max(max_rel, d / std::max(std::fabs(t[i]), 1e-300));
        within = within && tol.close(t[i], (*o)[i]);
      }
      if (within) continue;
      if (++differing <= 4) diffs += (diffs.empty() ? "" : "; ") + name + " max abs " + number_text(max_abs) + ", rel " + number_text(max_rel);
    }
    if (differing > 0)
      return std::string(w) + " differs in " + std::to_string(differing) + " parameter(s)" + (tol.bitwise() ? "" : " beyond " + tol.describe()) +
             ": " + diffs + (differing > 4 ? "; ..." : "");
  }
  // Provenance: reported, never a failure (the bits do not depend on it).
  const Json p = r.value("provenance", Json::object()), q = mine.value("provenance", Json::object());
  for (auto it = p.begin(); it != p.end(); ++it)
    if (q.contains(it.key()) && q[it.key()] != it.value())
      notes.push_back("provenance " + it.key() + ": the golden's " + it.value().dump() + ", this run's " + q[it.key()].dump());
  return "";
}

}  // namespace gr
