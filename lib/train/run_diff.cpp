// run_diff.cpp — see run_diff.h.
#include "train/run_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "io/safetensors.h"
#include "train/receipt.h"
#include "train/run_files.h"
#include "train/run_model.h"
#include "train/schedule.h"
#include "tensor/same_bits.h"

namespace gr {

namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::vector<std::string> file_lines(const std::string& path) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  const std::string s = read_file(path);
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string g17(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void require_run(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::exists(fs::path(dir) / "run.json", ec))
    throw InputError(dir, "", "not a run folder (no run.json)");
}

// Max abs and rel difference of two equally long arrays; false when their bytes are equal.
bool differs(const double* a, const double* b, int64_t n, double& max_abs, double& max_rel, int64_t& where) {
  if (first_different({a, static_cast<size_t>(n)}, {b, static_cast<size_t>(n)}) < 0) return false;
  max_abs = 0, max_rel = 0, where = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (where < 0 && !same_bits(a[i], b[i])) where = i;
    if (d > max_abs || d != d) max_abs = d;
    max_rel = std::max(max_rel, d / std::max(std::fabs(a[i]), 1e-300));
  }
  return true;
}

// One run replayed on the CPU tape up to a step (run_diff.h).
struct Replay {
  Spec spec;
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> opt;
  int64_t steps_per_epoch = 1;

  explicit Replay(const std::string& dir) : spec(load_run_spec(dir, {})) {
    if (spec.train.shards > 1) throw InputError(dir, "", "diff --at replays on one CPU tape; a sharded run (train.shards > 1) is not supported");
    const RunEngine e = read_run_engine(dir);
    DType dtype = DType::F64;
    parse_dtype(e.dtype, dtype);
    model = std::make_unique<Model>(spec, load_datasets(spec), dtype);
    const std::string init = dir + "/init.safetensors";
    std::error_code ec;
    if (fs::exists(init, ec)) model->load_params(read_safetensors(init), init);
    opt = std::make_unique<Optimizer>(model->make_optimizer());
    if (spec.data) {
      const int64_t n = model->data().train.rows, batch = model->program().batch;
      steps_per_epoch = spec.train.drop_last ? n / batch : (n + batch - 1) / batch;
    }
  }

  std::vector<int64_t> rows_of(int64_t t) const {  // the rows of step t (1-based), as the trainer takes them
    if (!spec.data) return {};
    const int64_t e = (t - 1) / steps_per_epoch, s = (t - 1) % steps_per_epoch, batch = model->program().batch;
    const int64_t n = model->data().train.rows;
    const std::vector<int64_t> order = epoch_order(spec, n, e);
    return {order.begin() + s * batch, order.begin() + std::min(n, (s + 1) * batch)};
  }

  // Records step t (forward and backward); the caller steps the optimizer and resets.
  const std::vector<Var>& record(int64_t t) {
    if (spec.optimizer.schedule) opt->set_lr(scheduled_lr(spec.optimizer, t, (t - 1) / steps_per_epoch, steps_per_epoch));
    const std::vector<int64_t> rows = rows_of(t);
    const std::vector<Var>& nodes = model->record(model->data().train, rows, model->dropout_key(t));
    if (!model->tape().backward(nodes[static_cast<size_t>(model->program().loss)]))
      throw Error("diff --at: backward failed: " + model->tape().error());
    return nodes;
  }
  void advance_to(int64_t step) {
    for (int64_t t = 1; t < step; ++t) {
      record(t);
      opt->step(model->tape());
      model->reset();
    }
  }
};

}  // namespace

RunDiff diff_runs(const std::string& a, const std::string& b) {
  require_run(a);
  require_run(b);
  RunDiff d;
  auto add = [&](const std::string& line) {
    d.same = false;
    d.lines.push_back(line);
  };
  // The loss logs: the first differing step.
  const std::vector<std::string> la = file_lines(a + "/loss.csv"), lb = file_lines(b + "/loss.csv");
  for (size_t i = 1; i < std::min(la.size(), lb.size()); ++i)
    if (la[i] != lb[i]) {
      add("loss.csv: first differs " + describe_loss_difference(static_cast<int64_t>(i), la[i], lb[i]));
      break;
    }
  if (la.size() != lb.size()) add("loss.csv: " + std::to_string(la.size() - 1) + " steps vs " + std::to_string(lb.size() - 1));
  // metrics.csv, seconds aside: the first differing epoch.
  std::error_code ec;
  if (fs::exists(a + "/metrics.csv", ec) && fs::exists(b + "/metrics.csv", ec)) {
    const std::string ma = metrics_without_seconds(read_file(a + "/metrics.csv")), mb = metrics_without_seconds(read_file(b + "/metrics.csv"));
    if (ma != mb) {
      size_t i = 0;
      while (i < std::min(ma.size(), mb.size()) && ma[i] == mb[i]) ++i;
      const size_t line = static_cast<size_t>(std::count(ma.begin(), ma.begin() + static_cast<std::ptrdiff_t>(i), '\n'));
      add("metrics.csv: first differs at epoch " + std::to_string(line) + " (seconds aside)");
    }
  }
  // The final weights, parameter by parameter.
  for (const char* w : {"weights.safetensors", "weights.best.safetensors"}) {
    const bool ha = fs::exists(fs::path(a) / w, ec), hb = fs::exists(fs::path(b) / w, ec);
    if (ha != hb) add(std::string(w) + ": only in " + (ha ? a : b));
    if (!ha || !hb) continue;
    const SafetensorsFile fa = read_safetensors(a + "/" + w), fb = read_safetensors(b + "/" + w);
    for (const NamedTensor& t : fa.tensors) {
      const Tensor* o = fb.find(t.name);
      if (!o || o->numel() != t.tensor.numel()) {
        add(std::string(w) + ": " + t.name + " is missing or of another shape in " + b);
        continue;
      }
      double mabs = 0, mrel = 0;
      int64_t where = -1;
      if (differs(t.tensor.data(), o->data(), t.tensor.numel(), mabs, mrel, where))
        add(std::string(w) + ": " + t.name + " " + t.tensor.shape().str() + " max abs " + g17(mabs) + ", max rel " + g17(mrel) +
            " (first at element " + std::to_string(where) + ")");
    }
  }
  // The receipts' fields.
  if (fs::exists(a + "/receipt.json", ec) && fs::exists(b + "/receipt.json", ec)) {
    const Json ra = Json::parse(read_file(a + "/receipt.json")), rb = Json::parse(read_file(b + "/receipt.json"));
    for (const Json& op : Json::diff(ra, rb)) {
      const std::string path = op.value("path", "");
      const Json::json_pointer p(path);
      const bool provenance = path.rfind("/provenance", 0) == 0;
      const std::string line = "receipt " + path + ": " + (ra.contains(p) ? ra.at(p).dump() : "absent") + " vs " +
                               (rb.contains(p) ? rb.at(p).dump() : "absent") + (provenance ? " (provenance: not a difference in bits)" : "");
      if (provenance) d.lines.push_back(line);
      else add(line);
    }
  }
  return d;
}

RunDiff diff_runs_at(const std::string& a, const std::string& b, int64_t step) {
  require_run(a);
  require_run(b);
  Replay ra(a), rb(b);
  for (const auto& [r, dir] : {std::pair<Replay*, std::string>{&ra, a}, {&rb, b}}) {
    const int64_t total = r->spec.train.epochs * r->steps_per_epoch;
    if (step < 1 || step > total)
      throw InputError(dir, "", "--at " + std::to_string(step) + " is outside the run's steps 1.." + std::to_string(total));
  }
  ra.advance_to(step);
  rb.advance_to(step);
  RunDiff d;
  auto add = [&](const std::string& line) {
    d.same = false;
    d.lines.push_back(line);
  };
  // The parameters entering the step: a difference there began earlier.
  const Program &pa = ra.model->program(), &pb = rb.model->program();
  for (size_t i = 0; i < pa.params.size() && d.same; ++i) {
    const auto it = pb.names.find(pa.params[i].name);
    if (it == pb.names.end() || it->second.kind != Ref::Kind::Param) continue;
    const ConstTensorView x = ra.model->tape().value(ra.model->params()[i]);
    const ConstTensorView y = rb.model->tape().value(rb.model->params()[static_cast<size_t>(it->second.index)]);
    double mabs = 0, mrel = 0;
    int64_t where = -1;
    if (x.shape == y.shape && differs(x.data, y.data, x.shape.numel(), mabs, mrel, where))
      add("parameter " + pa.params[i].name + " already differs entering step " + std::to_string(step) + " (max abs " + g17(mabs) +
          "): the runs parted earlier; try a smaller --at");
  }
  const std::vector<Var> na = ra.record(step), nb = rb.record(step);
  // Each replay against its own log: the replay must be the run.
  for (const auto& [r, dir, nodes] : {std::tuple<Replay*, std::string, const std::vector<Var>*>{&ra, a, &na}, {&rb, b, &nb}}) {
    const std::vector<std::string> log = file_lines(dir + "/loss.csv");
    const double loss = r->model->tape().scalar((*nodes)[static_cast<size_t>(r->model->program().loss)]);
    if (static_cast<size_t>(step) < log.size() && log[static_cast<size_t>(step)].substr(log[static_cast<size_t>(step)].rfind(',') + 1) != format_double(loss))
      d.lines.push_back("note: the replay of " + dir + " gives loss " + g17(loss) + " at step " + std::to_string(step) +
                        ", its loss.csv says " + log[static_cast<size_t>(step)] + " (it was trained differently: resumed, sharded?)");
  }
  // Forward values in graph order, matched by id; then gradients in the order backward makes them.
  std::string first_grad;
  for (size_t i = 0; i < pa.nodes.size(); ++i) {
    const std::string& id = pa.nodes[i].spec->id;
    const auto it = pb.names.find(id);
    if (it == pb.names.end() || it->second.kind != Ref::Kind::Node) {
      add("node \"" + id + "\" (#" + std::to_string(i) + ") is only in " + a);
      break;
    }
    const ConstTensorView x = ra.model->tape().value(na[i]), y = rb.model->tape().value(nb[static_cast<size_t>(it->second.index)]);
    if (!(x.shape == y.shape)) {
      add("node \"" + id + "\" has shape " + x.shape.str() + " in " + a + " but " + y.shape.str() + " in " + b);
      break;
    }
    double mabs = 0, mrel = 0;
    int64_t where = -1;
    if (differs(x.data, y.data, x.shape.numel(), mabs, mrel, where)) {
      add("step " + std::to_string(step) + ": the first node whose forward value differs is \"" + id + "\" (#" + std::to_string(i) +
          ", op " + (pa.nodes[i].spec->kind == NodeSpec::Kind::Op ? std::string(op_name(pa.nodes[i].spec->op)) : "layer") + ", shape " +
          x.shape.str() + "): max abs " + g17(mabs) + ", max rel " + g17(mrel) + ", first at element " + std::to_string(where) + " (" +
          g17(x[where]) + " vs " + g17(y[where]) + ")");
      break;
    }
  }
  if (d.same)
    for (size_t k = pa.nodes.size(); k-- > 0;) {
      if (!pa.nodes[k].requires_grad || !pa.nodes[k].reaches_loss) continue;
      const auto it = pb.names.find(pa.nodes[k].spec->id);
      const ConstTensorView x = ra.model->tape().grad(na[k]), y = rb.model->tape().grad(nb[static_cast<size_t>(it->second.index)]);
      double mabs = 0, mrel = 0;
      int64_t where = -1;
      if (x.shape == y.shape && differs(x.data, y.data, x.shape.numel(), mabs, mrel, where)) {
        add("step " + std::to_string(step) + ": every forward value is equal; the first gradient that differs (backward order) is of \"" +
            pa.nodes[k].spec->id + "\" (shape " + x.shape.str() + "): max abs " + g17(mabs) + ", max rel " + g17(mrel));
        break;
      }
    }
  if (d.same) d.lines.push_back("step " + std::to_string(step) + ": every node's value and gradient is bit-equal");
  ra.model->reset();
  rb.model->reset();
  return d;
}

}  // namespace gr
