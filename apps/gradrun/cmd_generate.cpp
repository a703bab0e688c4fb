// gradrun generate RUN_DIR --prompt TEXT --tokens N [--temperature t] [--top-k k] [--seed s] — sample
// text from a model trained on text data (train/text_gen.h), and `predict` on text prompts.
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "io/atomic_file.h"
#include "io/csv.h"
#include "io/errors.h"
#include "io/number_text.h"
#include "spec/text_data.h"
#include "train/predict.h"
#include "train/text_gen.h"

namespace gr::cli {

namespace {

struct GenerateFlags {
  int threads = 1;
  std::string spec, weights, which = "best", prompt, device, json;
  int64_t tokens = 0, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
  bool fuse = false, quiet = false;
};

void run_generate(const GenerateFlags& f) {
  apply_threads(f.threads);
  const TrainedSource src = trained_source(f.spec, f.weights);
  const Spec& spec = src.spec;
  const TrainedWeights w = read_trained(spec, src.weights, f.which);
  if (w.prep.vocab.empty())
    throw InputError(w.path, "", "this model was not trained on text data (\"data\": {\"text\": ...}): it has no vocabulary to generate with");
  Engine engine = choose_engine(spec, f.device, to_string(w.real), f.fuse);
  Model model(spec, shape_only_data(spec, w.prep), w.real);
  model.load_params(w.file, w.path);
  NextToken next(model, w.prep.vocab, engine.on_device() ? engine.take_backend() : nullptr, engine.spec.fuse);
  std::vector<int64_t> ids = prompt_ids(w.prep.vocab, f.prompt, "--prompt");
  const SampleOptions o{f.temperature, f.top_k, f.seed};
  for (int64_t s = 0; s < f.tokens; ++s) ids.push_back(sample_token(next.logits(ids), o, s));
  const std::vector<int64_t> made(ids.end() - f.tokens, ids.end());
  // The prompt as given (an empty prompt's line break is not printed), then the new tokens.
  const std::string text = (f.prompt.empty() ? "" : f.prompt + (w.prep.vocab.kind == "words" && f.tokens ? " " : "")) +
                           decode_tokens(w.prep.vocab, made);
  if (!f.json.empty()) {
    nlohmann::ordered_json j{{"prompt", f.prompt}, {"text", text}, {"prompt_ids", std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<long>(ids.size() - made.size()))},
                             {"ids", made}, {"temperature", f.temperature}, {"top_k", f.top_k}, {"seed", f.seed}};
    write_file_atomic(f.json, j.dump(1) + "\n");
  }
  if (!f.quiet) std::fwrite(text.data(), 1, text.size(), stdout), std::printf(text.empty() || text.back() != '\n' ? "\n" : "");
}

// Prompts: a .json file holds an array of strings; any other file one prompt per line (its line
// break not part of it, a trailing \r dropped).
std::vector<std::string> read_prompts(const std::string& file) {
  const std::string text = read_file(file);
  std::vector<std::string> out;
  if (std::filesystem::path(file).extension() == ".json") {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(file, "", std::string("malformed JSON: ") + e.what());
    }
    if (!j.is_array()) throw InputError(file, "", "expected an array of prompt strings");
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_string()) throw InputError(file, "/" + std::to_string(i), "expected a string");
      out.push_back(j[i].get<std::string>());
    }
    return out;
  }
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
    start = end + 1;
  }
  return out;
}

}  // namespace

// predict on a text model: one row per prompt, the next token's probabilities (or logits).
void predict_text(const Spec& spec, const TrainedWeights& w, Engine& engine, const std::string& data, const std::string& out,
                  bool logits, bool quiet) {
  if (std::filesystem::path(out).extension() != ".csv")
    throw UsageError("--out " + out + ": a text model's predictions are written as .csv");
  Model model(spec, shape_only_data(spec, w.prep), w.real);
  model.load_params(w.file, w.path);
  const Vocab& vocab = w.prep.vocab;
  NextToken next(model, vocab, engine.on_device() ? engine.take_backend() : nullptr, engine.spec.fuse);
  const std::vector<std::string> prompts = read_prompts(data);
  std::string csv = "prompt,next";
  for (const std::string& t : vocab.tokens) csv += "," + csv_cell(token_label(t));
  csv += "\n";
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int64_t> ids = prompt_ids(vocab, prompts[i], data + ": prompt " + std::to_string(i + 1));
    const std::vector<double> z = next.logits(ids);
    const std::vector<double> p = logits ? z : next_token_probabilities(z);
    const size_t best = static_cast<size_t>(std::max_element(z.begin(), z.end()) - z.begin());
    csv += csv_cell(prompts[i]) + "," + csv_cell(token_label(vocab.tokens[best]));
    for (double v : p) csv += "," + format_shortest(v);
    csv += "\n";
  }
  write_file_atomic(out, csv);
  if (!quiet)
    std::printf("predicted the next token of %zu prompts (%s) into %s\n", prompts.size(), logits ? "logits" : "probabilities", out.c_str());
}

void add_generate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* c = app.add_subcommand("generate", "Sample text from a model trained on text data (\"data\": {\"text\": ...})");
  c->add_option("model", f->spec, "A run folder (it holds its spec), or the spec file the weights were trained from")->required();
  c->add_option("--weights", f->weights, "A run folder or a weights file (needed with a spec file)");
  c->add_option("--which", f->which, "A run folder's weights: best (the default) | final")->check(CLI::IsMember({"best", "final"}));
  c->add_option("--prompt", f->prompt, "The text to continue (empty: the start of a line, for a chars vocabulary with line breaks)");
  c->add_option("--tokens", f->tokens, "How many tokens to generate")->required()->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  c->add_option("--temperature", f->temperature, "Divides the logits before sampling (default 1; 0: always the most likely token)")
      ->check(CLI::Range(0.0, 1e6));
  c->add_option("--top-k", f->top_k, "Sample among the k most likely tokens only (default 0: all)")->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  c->add_option("--seed", f->seed, "The sampler's seed (default 0): the same seed gives the same text on every engine");
  c->add_option("--json", f->json, "Also write {prompt, text, prompt_ids, ids, temperature, top_k, seed} as JSON");
  c->add_option("--device", f->device, "cpu | host | cuda | auto (default: the spec's device.kind)")
      ->check(CLI::IsMember({"cpu", "host", "cuda", "auto"}));
  c->add_flag("--fuse", f->fuse, "Run the device engine's fused program (with --device host or cuda)");
  c->add_flag("--quiet,-q", f->quiet, "Print nothing (with --json)");
  add_threads_option(c, f->threads);
  c->callback([f] { run_generate(*f); });
}

}  // namespace gr::cli
