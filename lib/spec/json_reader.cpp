// json_reader.cpp — JSON text → document, every syntax error located (line and column).
#include "spec/json_reader.h"

#include <algorithm>

namespace gr {

using Json = nlohmann::ordered_json;

nlohmann::ordered_json parse_json(const std::string& text, const std::string& file) {
  // The parser recurses per nesting level: refuse absurd depth before it can exhaust the stack.
  constexpr int kMaxDepth = 256;
  int depth = 0;
  bool in_string = false;
  size_t at_line = 1, at_col = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') at_line++, at_col = 0;
    else at_col++;
    if (in_string) {
      if (c == '\\') ++i, ++at_col;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth)
        throw InputError(file, "line " + std::to_string(at_line) + ", column " + std::to_string(at_col),
                         "malformed JSON: nested deeper than " + std::to_string(kMaxDepth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // Turn the byte offset into a line and column; keep nlohmann's reason, minus its prefixes.
    const size_t byte = std::min<size_t>(e.byte, text.size());
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < byte; ++i) {
      if (text[i] == '\n') line++, col = 1;
      else col++;
    }
    std::string why = e.what();
    const size_t colon = why.find(": ");
    if (colon != std::string::npos) why = why.substr(colon + 2);
    throw InputError(file, "line " + std::to_string(line) + ", column " + std::to_string(col), "malformed JSON: " + why);
  } catch (const Json::out_of_range& e) {
    // A number too large for a double ("1e999"; found by fuzz_spec). nlohmann gives no offset, only
    // the token: locate its first occurrence.
    std::string why = e.what();
    const size_t colon = why.find("] ");
    if (colon != std::string::npos) why = why.substr(colon + 2);
    const size_t q = why.find('\''), q2 = why.rfind('\'');
    size_t line = 1, col = 1;
    if (q != std::string::npos && q2 > q) {
      // The first occurrence outside a string (a description may quote the same number).
      const std::string token = why.substr(q + 1, q2 - q - 1);
      bool in_str = false;
      for (size_t i = 0; i < text.size(); ++i) {
        if (!in_str && !token.empty() && text.compare(i, token.size(), token) == 0) break;
        if (in_str && text[i] == '\\') ++i, ++col;
        else if (text[i] == '"') in_str = !in_str;
        if (text[i] == '\n') line++, col = 1;
        else col++;
      }
    }
    if (why.size() > 120) why = why.substr(0, 117) + "...";
    throw InputError(file, "line " + std::to_string(line) + ", column " + std::to_string(col), "malformed JSON: " + why);
  }
}

nlohmann::ordered_json sorted_keys(const nlohmann::ordered_json& j) {
  if (j.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& v : j) out.push_back(sorted_keys(v));
    return out;
  }
  if (!j.is_object()) return j;
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const std::string& k : keys) out[k] = sorted_keys(j.at(k));
  return out;
}

}  // namespace gr
