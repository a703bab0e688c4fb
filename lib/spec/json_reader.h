// json_reader.h — strict, located reading of a parsed JSON document.
//
// A JsonAt is a JSON value plus its JSON pointer. Every accessor checks the type and range and
// throws InputError(file, pointer, what) on a mismatch, so each error names the exact place.
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/errors.h"
#include "spec/suggest.h"

namespace gr {

class JsonAt {
 public:
  JsonAt(const nlohmann::ordered_json& v, std::string pointer, const std::string& file)
      : v_(v), ptr_(std::move(pointer)), file_(file) {}

  const nlohmann::ordered_json& json() const { return v_; }
  const std::string& pointer() const { return ptr_; }
  const std::string& file() const { return file_; }
  [[noreturn]] void fail(const std::string& what) const { throw InputError(file_, ptr_, what); }

  bool is_object() const { return v_.is_object(); }
  bool is_string() const { return v_.is_string(); }
  bool is_number() const { return v_.is_number(); }
  bool has(const char* key) const { return v_.is_object() && v_.contains(key); }

  JsonAt at(const std::string& key) const {
    if (!v_.is_object()) fail("expected an object, got " + type_name());
    auto it = v_.find(key);
    if (it == v_.end()) fail("missing required key \"" + key + "\"");
    return JsonAt(*it, ptr_ + "/" + escape(key), file_);
  }
  JsonAt at(size_t i) const { return JsonAt(v_.at(i), ptr_ + "/" + std::to_string(i), file_); }

  // Fails on any key not in `known` (unknown keys are errors, not ignored).
  void only_keys(std::initializer_list<const char*> known) const {
    if (!v_.is_object()) fail("expected an object, got " + type_name());
    for (auto it = v_.begin(); it != v_.end(); ++it) {
      bool ok = false;
      for (const char* k : known) ok = ok || it.key() == k;
      if (!ok) {
        std::string list;
        std::vector<std::string> words;
        for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k), words.emplace_back(k);
        throw InputError(file_, ptr_ + "/" + escape(it.key()),
                         "unknown key \"" + it.key() + "\"" + did_you_mean(it.key(), words) + " (known: " + list + ")");
      }
    }
  }

  std::string str() const {
    if (!v_.is_string()) fail("expected a string, got " + type_name());
    return v_.get<std::string>();
  }
  bool boolean() const {
    if (!v_.is_boolean()) fail("expected true or false, got " + type_name());
    return v_.get<bool>();
  }
  double number() const {
    if (!v_.is_number()) fail("expected a number, got " + type_name());
    const double d = v_.get<double>();
    if (!std::isfinite(d)) fail("expected a finite number");
    return d;
  }
  double positive() const {
    const double d = number();
    if (!(d > 0)) fail("expected a number > 0, got " + v_.dump());
    return d;
  }
  int64_t integer(int64_t lo = std::numeric_limits<int64_t>::min(), int64_t hi = std::numeric_limits<int64_t>::max()) const {
    if (!v_.is_number_integer()) fail("expected an integer, got " + (v_.is_number() ? v_.dump() : type_name()));
    if (v_.is_number_unsigned() && v_.get<uint64_t>() > static_cast<uint64_t>(hi))
      fail("integer " + v_.dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    const int64_t i = v_.get<int64_t>();
    if (i < lo || i > hi)
      fail("integer " + std::to_string(i) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return i;
  }
  std::vector<JsonAt> array() const {
    if (!v_.is_array()) fail("expected an array, got " + type_name());
    std::vector<JsonAt> out;
    for (size_t i = 0; i < v_.size(); ++i) out.push_back(at(i));
    return out;
  }
  std::vector<int64_t> integers(int64_t lo, int64_t hi) const {
    std::vector<int64_t> out;
    for (const JsonAt& e : array()) out.push_back(e.integer(lo, hi));
    return out;
  }
  // Numbers nested to any depth (row-major), e.g. [[1, 2], [3, 4]] → 1 2 3 4.
  void flatten_numbers(std::vector<double>& out) const {
    if (v_.is_array()) {
      for (const JsonAt& e : array()) e.flatten_numbers(out);
    } else {
      out.push_back(number());
    }
  }
  std::string type_name() const {
    if (v_.is_null()) return "null";
    if (v_.is_boolean()) return "a boolean";
    if (v_.is_number()) return "a number";
    if (v_.is_string()) return "a string";
    if (v_.is_array()) return "an array";
    return "an object";
  }

  static std::string escape(const std::string& key) {  // RFC 6901
    std::string s;
    for (char c : key) s += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return s;
  }

 private:
  const nlohmann::ordered_json& v_;
  std::string ptr_;
  const std::string& file_;
};

// Parses JSON text; a syntax error becomes InputError(file, "line L, column C", "malformed JSON: ...").
nlohmann::ordered_json parse_json(const std::string& text, const std::string& file);

// `j` with its object keys sorted at every level: a canonical form whose dump() does not depend on
// key order (run identities, model identities).
nlohmann::ordered_json sorted_keys(const nlohmann::ordered_json& j);

}  // namespace gr
