// overrides.cpp — `--set PATH=VALUE` applied to a spec's JSON text (overrides.h).
#include "spec/overrides.h"

#include <algorithm>

#include "emit/bind_expr.h"
#include "io/atomic_file.h"
#include "spec/json_reader.h"

namespace gr {

namespace {

using Json = nlohmann::ordered_json;

std::vector<std::string> pointer_tokens(const std::string& pointer) {  // RFC 6901, "/a/b~1c" → a, b/c
  std::vector<std::string> out;
  size_t at = 1;
  while (at <= pointer.size()) {
    const size_t next = std::min(pointer.find('/', at), pointer.size());
    std::string tok = pointer.substr(at, next - at), plain;
    for (size_t i = 0; i < tok.size(); ++i) {
      if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) plain += tok[++i] == '0' ? '~' : '/';
      else plain += tok[i];
    }
    out.push_back(plain);
    at = next + 1;
  }
  return out;
}

bool is_index(const std::string& s) {
  return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         (s == "0" || s[0] != '0');
}

}  // namespace

std::string override_pointer(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  std::string pointer;
  size_t at = 0;
  while (true) {
    const size_t dot = path.find('.', at);
    pointer += "/" + JsonAt::escape(path.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    if (dot == std::string::npos) return pointer;
    at = dot + 1;
  }
}

std::string apply_overrides(const std::string& json_text, const std::vector<std::string>& sets, const std::string& file) {
  if (sets.empty()) return json_text;
  Json doc = parse_json(json_text, file);
  if (!doc.is_object()) throw InputError(file, "", "a spec is a JSON object, got " + JsonAt(doc, "", file).type_name());
  for (const std::string& item : sets) {
    const std::string where = "--set " + printable(item, 200);
    auto fail = [&](const std::string& what) { throw InputError(file, where, what); };
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail("expected PATH=VALUE (e.g. optimizer.lr=0.003)");
    const std::string path = item.substr(0, eq), text = item.substr(eq + 1);
    if (path.empty() || path == "/") fail("PATH is empty (expected e.g. optimizer.lr or /optimizer/lr)");
    const std::string pointer = override_pointer(path);
    Json value;
    try {
      value = parse_json(text, where);
    } catch (const InputError& e) {
      // Not JSON: a plain string. A number JSON cannot hold is an error, not the string "1e999".
      if (std::string(e.what()).find("number overflow") != std::string::npos)
        fail("VALUE " + printable(text, 80) + " is a number too large for a double");
      value = text;
    }
    Json* at = &doc;
    std::string done;
    for (const std::string& tok : pointer_tokens(pointer)) {
      if (tok.empty()) fail("PATH " + printable(path, 80) + " has an empty part");
      if (at->is_object()) {
        at = &(*at)[tok];  // a missing key is created (null until set or descended into)
        if (at->is_null()) *at = Json::object();
      } else if (at->is_array()) {
        if (!is_index(tok) || std::stoul(tok) >= at->size())
          fail((done.empty() ? "/" : done) + " is an array of " + std::to_string(at->size()) + "; \"" + printable(tok, 80) +
               "\" is not an index in it");
        at = &(*at)[std::stoul(tok)];
      } else {
        fail((done.empty() ? "/" : done) + " is " + JsonAt(*at, done, file).type_name() + ", not an object or array");
      }
      done += "/" + JsonAt::escape(tok);
    }
    *at = std::move(value);
  }
  return doc.dump(2) + "\n";
}

Spec load_spec(const std::string& path, const std::vector<std::string>& sets) {
  if (sets.empty()) return load_spec(path);
  const std::string text = apply_overrides(read_file(path), sets, path);
  try {
    Spec s = parse_spec(text, path);
    s.overrides = sets;
    return s;
  } catch (const InputError& e) {
    // The last override that set this place (or a value above it) is what the user wrote there.
    const std::string& place = e.place();
    const std::string at = place.substr(0, place.find(" (in "));  // a block's node: "/blocks/B/graph/K (in b1.0)"
    for (auto it = sets.rbegin(); it != sets.rend(); ++it) {
      const std::string pointer = override_pointer(it->substr(0, it->find('=')));
      if (!at.empty() && at[0] == '/' && (at == pointer || at.starts_with(pointer + "/") || pointer.starts_with(at + "/")))
        throw InputError(path + ": --set " + printable(*it, 200), place, std::string(e.what()).substr(located(e.file(), place, "").size()));
    }
    throw;
  }
}

}  // namespace gr
