#include "train/emit_spec.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "emit/bind_expr.h"
#include "train/host_build.h"
#include "io/errors.h"
#include "spec/init.h"
#include "tensor/same_bits.h"

namespace gr {

namespace {

std::string pointer_key(const std::string& key) {  // RFC 6901
  std::string s;
  for (char c : key) s += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return s;
}

std::string show(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g (bits 0x%016" PRIx64 ")", d, std::bit_cast<uint64_t>(d));
  return buf;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out.flush()) throw IoError(path.string(), "cannot write");
}

}  // namespace

SpecEmitter::SpecEmitter(const Spec& spec) : spec_(spec) {
  // One example: one row per data input, the whole data set in file order.
  spec_.train.batch_size = 1;
  if (spec_.data) spec_.data->validation = 0.0, spec_.data->cv_folds = spec_.data->cv_fold = 0;
  const std::string& file = spec_.path;
  if (const std::string why = function_name_problem(spec_.emit.function); !why.empty())
    throw InputError(file, "/emit/function", why);

  data_ = load_datasets(spec_);
  program_ = resolve_program(spec_, data_.train);
  for (size_t i = 0; i < program_.params.size(); ++i) {
    const ProgramParam& pp = program_.params[i];
    if (pp.shape.numel() != 1)
      throw InputError(file, pp.pointer,
                       "parameter \"" + pp.name + "\" has shape " + pp.shape.str() +
                           "; the scalar emitter binds each parameter to one p[j], so every parameter must hold exactly one element");
    const std::vector<double> v = init_values(pp.init, pp.shape, spec_.seed, i);
    params_.push_back(tape_.param(pp.shape, v));
    init_.push_back(v[0]);
    param_names_.push_back(pp.name);
  }
  for (const ConstSpec& c : spec_.consts) consts_.push_back(tape_.constant(Shape(std::span<const int64_t>(c.shape)), c.values));
  for (const Shape& s : program_.input_shapes)
    slots_.push_back(tape_.constant(s, std::vector<double>(static_cast<size_t>(s.numel()), 0.0)));
  GR_ASSERT(tape_.ok());
  mark_ = tape_.mark();

  auto input_pointer = [&](const std::string& name) {
    if (spec_.data)
      for (const InputSpec& in : spec_.data->inputs)
        if (in.name == name) return in.pointer;
    return std::string("/data/inputs/") + pointer_key(name);
  };

  // emit.bind: data inputs and consts only, one value per example each.
  for (const auto& [name, expr] : spec_.emit.bind) {
    const std::string place = "/emit/bind/" + pointer_key(name);
    auto it = program_.names.find(name);
    if (it == program_.names.end()) {
      std::string known;
      for (const std::string& n : program_.input_names) known += (known.empty() ? "" : ", ") + n;
      for (const ConstSpec& c : spec_.consts) known += (known.empty() ? "" : ", ") + c.name;
      throw InputError(file, place, "unknown name \"" + name + "\" (data inputs and consts: " + (known.empty() ? "none" : known) + ")");
    }
    Var leaf;
    switch (it->second.kind) {
      case Ref::Kind::Input: leaf = slots_[static_cast<size_t>(it->second.index)]; break;
      case Ref::Kind::Const: leaf = consts_[static_cast<size_t>(it->second.index)]; break;
      case Ref::Kind::Param:
        throw InputError(file, place, "\"" + name + "\" is a parameter; parameters bind to p[j] in registration order");
      case Ref::Kind::Node:
        throw InputError(file, place, "\"" + name + "\" is a graph node; only data inputs and consts bind to C expressions");
    }
    if (tape_.node(leaf).numel() != 1)
      throw InputError(file, place,
                       "\"" + name + "\" holds " + std::to_string(tape_.node(leaf).numel()) +
                           " values per example; a C expression gives one");
    // The bind grammar (emit/bind_expr.h): what reaches the source is the parser's re-print.
    const EmitSignature sig = spec_.emit.signature == "params" ? EmitSignature::Params : EmitSignature::Dataset;
    try {
      binds_.emplace_back(leaf.id, parse_bind(expr, sig, static_cast<int64_t>(params_.size())));
    } catch (const BindError& e) {
      throw InputError(file, place, e.what());
    }
  }
  std::sort(binds_.begin(), binds_.end());
  for (size_t k = 0; k < binds_.size(); ++k)
    if (binds_[k].second == "v") v_leaf_ = static_cast<int>(k);

  record_example(0);

  // Every data input the loss depends on needs a C expression.
  std::vector<char> cone(static_cast<size_t>(loss_.id) + 1, 0);
  cone[static_cast<size_t>(loss_.id)] = 1;
  for (int32_t id = loss_.id; id >= 0; --id)
    if (cone[static_cast<size_t>(id)]) {
      const Node& n = tape_.node(id);
      if (n.a >= 0) cone[static_cast<size_t>(n.a)] = 1;
      if (n.b >= 0) cone[static_cast<size_t>(n.b)] = 1;
    }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const int32_t id = slots_[i].id;
    const bool bound = std::any_of(binds_.begin(), binds_.end(), [&](const auto& b) { return b.first == id; });
    if (id <= loss_.id && cone[static_cast<size_t>(id)] && !bound)
      throw InputError(file, input_pointer(program_.input_names[i]),
                       "data input \"" + program_.input_names[i] +
                           "\" reaches the loss but has no C expression: add \"" + program_.input_names[i] +
                           "\": \"<C expression>\" to emit.bind");
  }

  // Names: leaves by their spec entries, graph nodes by id (a composite's inner nodes id:op).
  std::vector<EmitNodeName> names(static_cast<size_t>(tape_.size()));
  for (size_t i = 0; i < params_.size(); ++i) names[static_cast<size_t>(params_[i].id)] = {program_.params[i].pointer, program_.params[i].name};
  for (size_t i = 0; i < consts_.size(); ++i) names[static_cast<size_t>(consts_[i].id)] = {spec_.consts[i].pointer, spec_.consts[i].name};
  for (size_t i = 0; i < slots_.size(); ++i)
    names[static_cast<size_t>(slots_[i].id)] = {input_pointer(program_.input_names[i]), program_.input_names[i]};
  int32_t prev = mark_ - 1;
  for (size_t i = 0; i < program_.nodes.size(); ++i) {
    const NodeSpec& ns = *program_.nodes[i].spec;
    const int32_t last = nodes_[i].id;
    for (int32_t id = prev + 1; id <= last; ++id)
      names[static_cast<size_t>(id)] = {ns.pointer, id == last ? ns.id : ns.id + ":" + std::string(op_name(tape_.node(id).op))};
    prev = std::max(prev, last);
  }

  EmitRequest req;
  req.tape = &tape_;
  req.loss = loss_;
  req.params = params_;
  for (const auto& [id, expr] : binds_) req.bound[id] = expr;
  req.function = spec_.emit.function;
  req.signature = spec_.emit.signature == "params" ? EmitSignature::Params : EmitSignature::Dataset;
  const std::string spec_file = std::filesystem::path(spec_.path).filename().string();
  req.preamble.push_back(spec_.emit.function + ": the gradient of \"" + spec_.loss + "\" from " + spec_file + " (spec \"" + spec_.name +
                         "\", sha256 " + spec_.sha256 + ")");
  std::string ps;
  for (size_t j = 0; j < param_names_.size(); ++j) ps += (j ? ", p[" : "p[") + std::to_string(j) + "] = " + param_names_[j];
  req.preamble.push_back("parameters: " + (ps.empty() ? std::string("none") : ps));
  std::string bs;
  for (const auto& [id, expr] : binds_) bs += (bs.empty() ? "" : ", ") + names[static_cast<size_t>(id)].label + " = " + expr;
  req.preamble.push_back("data: " + (bs.empty() ? std::string("none") : bs));
  for (const auto& [id, expr] : binds_) bind_names_.push_back(names[static_cast<size_t>(id)].label);
  req.names = std::move(names);
  try {
    source_ = emit_scalar_cuda(req);
  } catch (const EmitError& e) {
    throw InputError(file, e.place(), e.message());
  }
}

int64_t SpecEmitter::examples() const { return spec_.data ? data_.train.rows : 1; }

void SpecEmitter::record_example(int64_t row) {
  tape_.reset_to(mark_);
  if (spec_.data) {
    const int64_t rows[1] = {row};
    for (size_t i = 0; i < slots_.size(); ++i) gather_rows(data_.train.tensors[i], rows, tape_.leaf_values(slots_[i]).data());
  }
  record_program(tape_, program_, slots_, params_, consts_, nodes_);
  GR_ASSERT(tape_.ok());  // shapes were checked by resolve_program at batch size 1
  loss_ = nodes_[static_cast<size_t>(program_.loss)];
}

std::vector<double> SpecEmitter::leaf_values_for_row(int64_t row) const {
  std::vector<double> out;
  for (const auto& [id, expr] : binds_) {
    double v = tape_.node(id).val[0];
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].id == id) v = data_.train.tensors[i].values()[static_cast<size_t>(row)];
    out.push_back(v);
  }
  return out;
}

EmitVerifyResult SpecEmitter::verify() {
  EmitVerifyResult r;
  r.params = static_cast<int64_t>(params_.size());
  const bool dataset = spec_.emit.signature != "params";

  // The harness: the emitted file, included unchanged, plus one entry point that evaluates every
  // bind expression and calls the emitted function.
  std::string h =
      "// gradrun emit-cuda --verify harness\n"
      "static double gr_verify_loss_value;\n"
      "#define gr_emit_loss(val) (gr_verify_loss_value = (val))\n"
      "#include \"emitted.cu\"\n\n";
  h += dataset ? "static void gr_verify_binds(long long x, double v, const double* p, double* b) {\n  (void)x;\n  (void)v;\n"
               : "static void gr_verify_binds(const double* p, double* b) {\n";
  h += "  (void)p;\n  (void)b;\n";
  for (size_t k = 0; k < binds_.size(); ++k) h += "  b[" + std::to_string(k) + "] = (double)(" + binds_[k].second + ");\n";
  h += "}\n\n";
  h += "extern \"C\" __attribute__((visibility(\"default\"))) void gr_emit_verify_run(long long x, double v, const double* p,\n"
       "                                                                         double* g, double* loss, double* binds) {\n";
  h += dataset ? "  gr_verify_binds(x, v, p, binds);\n" : "  (void)x;\n  (void)v;\n  gr_verify_binds(p, binds);\n";
  h += "  gr_verify_loss_value = 0.0;\n";
  h += "  " + spec_.emit.function + (dataset ? "(x, v, g, p);\n" : "(g, p);\n");
  h += "  *loss = gr_verify_loss_value;\n}\n";

  TempDir dir("gradrun-emit-");
  write_text(dir.path() / "emitted.cu", source_);
  write_text(dir.path() / "verify.cpp", h);
  const HostCompile c = compile_shared_object(dir.path() / "verify.cpp", dir.path() / "verify.so");
  r.compiler = c.command;
  if (!c.ok) {
    std::string out = c.output.size() > 6000 ? c.output.substr(0, 6000) + "\n..." : c.output;
    r.difference = "the emitted code does not compile on the host (" + c.command + "):\n" + out;
    return r;
  }
  SharedObject so(dir.path() / "verify.so");
  using RunFn = void (*)(long long, double, const double*, double*, double*, double*);
  const auto run = reinterpret_cast<RunFn>(so.symbol("gr_emit_verify_run"));
  if (const std::string fp = fp_environment_problem(); !fp.empty()) {
    r.difference = "the floating-point environment breaks the bit rule: " + fp;
    return r;
  }

  const int64_t n = examples();
  std::vector<double> g(params_.size()), bound(binds_.size());
  // Bits must be equal; two NaNs count as equal whatever their sign and payload (IEEE 754 leaves
  // those unspecified for arithmetic results and compilers use the freedom: GCC -O2 turns
  // slot + (-q) into slot - q, which keeps a NaN's sign where -O0 flips it), but are counted.
  auto same = [&r](double got, double want) {
    if (same_bits(got, want)) return true;  // equal bytes, or NaN in both (tensor/same_bits.h)
    if (got == got || want == want) return false;
    ++r.nan_bit_differences;
    return true;
  };
  for (int64_t row = 0; row < n; ++row) {
    const std::vector<double> want_leaf = leaf_values_for_row(row);
    const double v = v_leaf_ >= 0 ? want_leaf[static_cast<size_t>(v_leaf_)] : 0.0;
    std::fill(g.begin(), g.end(), 0.0);
    double loss = 0.0;
    run(static_cast<long long>(row), v, init_.data(), g.data(), &loss, bound.data());
    const std::string at = "example " + std::to_string(row) + (dataset ? " (x = " + std::to_string(row) + ", v = " + show(v) + ")" : "");
    r.examples = row;
    for (size_t k = 0; k < binds_.size(); ++k)
      if (!same(bound[k], want_leaf[k])) {
        r.difference = at + ": emit.bind of \"" + bind_names_[k] + "\" (" + binds_[k].second + ") gives " + show(bound[k]) +
                       " but the tape's leaf holds " + show(want_leaf[k]);
        return r;
      }
    record_example(row);
    if (!tape_.backward(loss_)) throw Error("emit --verify: backward failed: " + tape_.error());
    const double tape_loss = tape_.scalar(loss_);
    if (!same(loss, tape_loss)) {
      r.difference = at + ": loss: emitted " + show(loss) + ", tape " + show(tape_loss);
      return r;
    }
    for (size_t j = 0; j < params_.size(); ++j) {
      const double want = tape_.grad(params_[j]).data[0];
      if (!same(g[j], want)) {
        r.difference = at + ": d" + spec_.loss + "/d" + param_names_[j] + " (g[" + std::to_string(j) + "]): emitted " + show(g[j]) +
                       ", tape " + show(want);
        return r;
      }
    }
  }
  r.examples = n;
  r.ok = true;
  return r;
}

}  // namespace gr
