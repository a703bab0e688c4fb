// text_data.cpp — text files as token windows (text_data.h documents the rules).
#include "spec/text_data.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "spec/json_reader.h"

namespace gr {

namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// The length of the UTF-8 sequence starting at s[i] (1..4), or 0 when it is malformed (a bad lead
// byte, a missing or bad continuation byte, an overlong form, a surrogate or a value above U+10FFFF).
size_t utf8_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) >> 6) != 0x2) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  const uint32_t min = n == 1 ? 0 : n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

Tensor ids_tensor(const std::vector<int64_t>& ids, int64_t context, int64_t begin, int64_t end, int64_t shift) {
  std::vector<double> v;
  v.reserve(static_cast<size_t>((end - begin) * context));
  for (int64_t r = begin; r < end; ++r)
    for (int64_t t = 0; t < context; ++t) v.push_back(static_cast<double>(ids[static_cast<size_t>(r * context + t + shift)]));
  return Tensor(Shape{end - begin, context}, std::move(v));
}

}  // namespace

TextTokens split_tokens(const std::string& text, const std::string& kind, const std::string& file) {
  TextTokens out;
  int64_t line = 1;
  if (kind == "chars") {
    for (size_t i = 0; i < text.size();) {
      const size_t n = utf8_length(text, i);
      if (n == 0) throw InputError(file, "line " + std::to_string(line), "malformed UTF-8 (byte " + std::to_string(i) + " of the file); text data is read as UTF-8 characters");
      out.tokens.push_back(text.substr(i, n));
      out.lines.push_back(line);
      if (text[i] == '\n') ++line;
      i += n;
    }
  } else {
    for (size_t i = 0; i < text.size();) {
      if (blank(text[i])) {
        if (text[i] == '\n') ++line;
        ++i;
        continue;
      }
      size_t j = i;
      while (j < text.size() && !blank(text[j])) ++j;
      out.tokens.push_back(text.substr(i, j - i));
      out.lines.push_back(line);
      i = j;
    }
  }
  return out;
}

Vocab build_vocab(const std::string& kind, int64_t context, const std::vector<std::string>& tokens) {
  Vocab v;
  v.kind = kind;
  v.context = context;
  v.tokens = tokens;
  std::sort(v.tokens.begin(), v.tokens.end());
  v.tokens.erase(std::unique(v.tokens.begin(), v.tokens.end()), v.tokens.end());
  return v;
}

int64_t token_id(const Vocab& vocab, const std::string& token) {
  const auto it = std::lower_bound(vocab.tokens.begin(), vocab.tokens.end(), token);
  return it != vocab.tokens.end() && *it == token ? static_cast<int64_t>(it - vocab.tokens.begin()) : -1;
}

std::string token_label(const std::string& token) {
  const std::string j = nlohmann::json(token).dump();
  return j.substr(1, j.size() - 2);
}

std::vector<int64_t> encode_tokens(const Vocab& vocab, const TextTokens& t, const std::string& file) {
  std::vector<int64_t> ids;
  ids.reserve(t.tokens.size());
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    const int64_t id = token_id(vocab, t.tokens[i]);
    if (id < 0)
      throw InputError(file, "line " + std::to_string(t.lines[i]),
                       "token \"" + token_label(t.tokens[i]) + "\" is not in the model's vocabulary (" +
                           std::to_string(vocab.tokens.size()) + " " + vocab.kind + ", saved in the run's vocab.json)");
    ids.push_back(id);
  }
  return ids;
}

std::string decode_tokens(const Vocab& vocab, const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (vocab.kind == "words" && i > 0) s += ' ';
    s += vocab.tokens[static_cast<size_t>(ids[i])];
  }
  return s;
}

int64_t window_count(int64_t tokens, int64_t context) { return tokens < 1 ? 0 : (tokens - 1) / context; }

DataTable text_windows(const std::vector<int64_t>& ids, int64_t context, int64_t begin, int64_t end,
                       const std::string& x_name, const std::string& y_name) {
  DataTable t;
  t.rows = end - begin;
  t.names = {x_name, y_name};
  t.tensors.push_back(ids_tensor(ids, context, begin, end, 0));
  t.tensors.push_back(ids_tensor(ids, context, begin, end, 1));
  return t;
}

Datasets load_text_datasets(const Spec& spec) {
  const DataSpec& d = *spec.data;
  const std::string& file = d.files.at("");
  const TextTokens t = split_tokens(read_file(file), d.vocab, file);
  Datasets out;
  out.vocab = build_vocab(d.vocab, d.context, t.tokens);
  const std::vector<int64_t> ids = encode_tokens(out.vocab, t, file);
  const int64_t n = window_count(static_cast<int64_t>(ids.size()), d.context);
  if (n == 0)
    throw InputError(spec.path, "/data/context",
                     file + " holds " + std::to_string(ids.size()) + " tokens; a context of " + std::to_string(d.context) +
                         " needs at least " + std::to_string(d.context + 1));
  const int64_t n_val = static_cast<int64_t>(std::floor(d.validation * static_cast<double>(n)));
  if (d.validation > 0 && (n_val == 0 || n_val == n))
    throw InputError(spec.path, "/data/validation",
                     "a validation fraction of " + std::to_string(d.validation) + " leaves an empty split of " + std::to_string(n) +
                         " windows");
  const std::string &x = d.inputs[0].name, &y = d.inputs[1].name;
  out.train = text_windows(ids, d.context, 0, n - n_val, x, y);
  if (n_val > 0) out.validation = text_windows(ids, d.context, n - n_val, n, x, y);
  else out.validation.names = {x, y};  // as load_datasets: no validation tensors without rows
  out.mean.resize(2);
  out.std.resize(2);
  out.fit.resize(2);
  return out;
}

DataTable read_text_windows(const Spec& spec, const Vocab& vocab, const std::string& file) {
  const TextTokens t = split_tokens(read_file(file), vocab.kind, file);
  const std::vector<int64_t> ids = encode_tokens(vocab, t, file);
  const int64_t n = window_count(static_cast<int64_t>(ids.size()), vocab.context);
  if (n == 0)
    throw InputError(file, "", "holds " + std::to_string(ids.size()) + " tokens; the model's context of " +
                                   std::to_string(vocab.context) + " needs at least " + std::to_string(vocab.context + 1));
  return text_windows(ids, vocab.context, 0, n, spec.data->inputs[0].name, spec.data->inputs[1].name);
}

std::string vocab_json(const Vocab& vocab) {
  nlohmann::ordered_json j{{"kind", vocab.kind}, {"context", vocab.context}, {"tokens", vocab.tokens}};
  return j.dump(1) + "\n";
}

Vocab vocab_from_json(const std::string& text, const std::string& file) {
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw InputError(file, "", std::string("malformed JSON: ") + e.what());
  }
  const JsonAt root(doc, "", file);
  Vocab v;
  v.kind = root.at("kind").str();
  if (v.kind != "chars" && v.kind != "words") root.at("kind").fail("unknown vocabulary \"" + v.kind + "\" (known: chars, words)");
  v.context = root.at("context").integer(1, 1 << 20);
  const JsonAt toks = root.at("tokens");
  for (const JsonAt& t : toks.array()) v.tokens.push_back(t.str());
  if (v.tokens.empty()) toks.fail("expected at least one token");
  if (!std::is_sorted(v.tokens.begin(), v.tokens.end()) ||
      std::adjacent_find(v.tokens.begin(), v.tokens.end()) != v.tokens.end())
    toks.fail("the tokens must be distinct and sorted byte-wise (their ids are their positions)");
  return v;
}

}  // namespace gr
