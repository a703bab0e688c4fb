// bind_expr.cpp — the emit.bind grammar (bind_expr.h): a recursive-descent parser that re-prints
// each node it accepts, so generated source only ever holds text this file wrote.
#include "emit/bind_expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace gr {

std::string printable(std::string_view text, size_t max_chars) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  size_t shown = 0;
  for (char ch : text) {
    if (shown == max_chars) return out + "...";
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      // Non-ASCII bytes too: a message stays valid UTF-8 even when the input is not.
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
    ++shown;
  }
  return out;
}

std::string function_name_problem(std::string_view name) {
  const std::string shown = "\"" + printable(name) + "\"";
  if (name.empty()) return "the function name is empty";
  if (name.size() > 64) return shown + " is longer than 64 characters";
  if (std::isdigit(static_cast<unsigned char>(name[0])) ||
      !std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }))
    return shown + " is not a C identifier (letters, digits and _, not starting with a digit)";
  if (name.starts_with("__") || (name[0] == '_' && name.size() > 1 && std::isupper(static_cast<unsigned char>(name[1]))))
    return shown + " is reserved for the C implementation";
  if (name.starts_with("gr_")) return shown + " is reserved: gr_* names the emitted file's own definitions and hooks";
  return "";
}

namespace {

enum class Type { Int, Float, Double };

struct Node {
  std::string text;
  Type type;
  bool unary = false;  // starts with a sign: another sign before it needs parentheses ("- -x", not "--x")
};

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Parser {
 public:
  Parser(std::string_view s, EmitSignature sig, int64_t params, const BindLimits& lim)
      : s_(s), sig_(sig), params_(params), lim_(lim) {}

  std::string run() {
    if (s_.size() > lim_.max_length)
      throw BindError(lim_.max_length + 1, "a bind is at most " + std::to_string(lim_.max_length) + " characters long");
    skip();
    if (pos_ == s_.size()) throw BindError(1, "empty expression");
    Node n = expr();
    skip();
    if (pos_ != s_.size()) unexpected("after a complete expression");
    return n.text;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const { throw BindError(at + 1, what); }

  // The token at pos_, as written, for messages.
  std::string token_at(size_t at) const {
    if (at >= s_.size()) return "end of expression";
    size_t e = at + 1;
    if (ident_char(s_[at]))
      while (e < s_.size() && ident_char(s_[e])) ++e;
    return "\"" + printable(s_.substr(at, e - at)) + "\"";
  }

  [[noreturn]] void unexpected(const std::string& where) const {
    std::string what = "unexpected " + token_at(pos_) + " " + where;
    if (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '\n' || c == '\r') what = "a bind is one line; line break " + where;
      else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') what = token_at(pos_) + " is not allowed " + where;
    }
    fail(pos_, what + " (a bind is built from numbers, " + names() +
                   ", casts to double or float, + - * / and parentheses)");
  }

  std::string names() const { return sig_ == EmitSignature::Dataset ? "x, v, p[k]" : "p[k]"; }

  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  bool peek(char c) {
    skip();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c, const char* where) {
    if (!peek(c)) unexpected(std::string("where '") + c + "' " + where);
    ++pos_;
  }

  void enter() {
    if (++depth_ > lim_.max_depth) fail(pos_, "nested more than " + std::to_string(lim_.max_depth) + " deep");
  }

  static Type join(Type a, Type b) {
    if (a == Type::Double || b == Type::Double) return Type::Double;
    if (a == Type::Float || b == Type::Float) return Type::Float;
    return Type::Int;
  }

  Node expr() {
    Node lhs = term();
    while (peek('+') || peek('-')) {
      const size_t at = pos_;
      const char op = s_[pos_++];
      lhs = binary(std::move(lhs), op, term(), at);
    }
    return lhs;
  }

  Node term() {
    Node lhs = unary();
    while (peek('*') || peek('/')) {
      const size_t at = pos_;
      const char op = s_[pos_++];
      lhs = binary(std::move(lhs), op, unary(), at);
    }
    return lhs;
  }

  Node binary(Node a, char op, Node b, size_t at) const {
    if (a.type == Type::Int && b.type == Type::Int)
      fail(at, std::string("integer arithmetic ('") + op +
                   "' of two integers) can overflow or trap; cast an operand to double, e.g. (double)x");
    return Node{a.text + " " + op + " " + b.text, join(a.type, b.type)};
  }

  Node unary() {
    enter();
    Node out;
    skip();
    if (peek('+') || peek('-')) {
      const char op = s_[pos_++];
      Node n = unary();
      out = Node{std::string(1, op) + (n.unary ? "(" + n.text + ")" : n.text), n.type, true};
    } else if (peek('(') && cast_ahead()) {
      ++pos_;
      skip();
      const size_t at = pos_;
      const std::string type = word();
      if (type != "double" && type != "float") fail(at, "only casts to double or float are allowed");
      expect(')', "closes the cast");
      Node n = unary();
      out = Node{"(" + type + ")" + n.text, type == "double" ? Type::Double : Type::Float};
    } else {
      out = primary();
    }
    --depth_;
    return out;
  }

  // After '(': a cast when the parenthesis holds one identifier that is not a name of the signature.
  bool cast_ahead() const {
    size_t i = pos_ + 1;
    while (i < s_.size() && (s_[i] == ' ' || s_[i] == '\t')) ++i;
    if (i >= s_.size() || !(std::isalpha(static_cast<unsigned char>(s_[i])) || s_[i] == '_')) return false;
    size_t e = i;
    while (e < s_.size() && ident_char(s_[e])) ++e;
    const std::string_view w = s_.substr(i, e - i);
    if (w == "x" || w == "v" || w == "p") return false;
    while (e < s_.size() && (s_[e] == ' ' || s_[e] == '\t')) ++e;
    // "(T)" or "(T*": a type in parentheses, allowed or not ("(char*)" is refused as a cast).
    return e < s_.size() && (s_[e] == ')' || s_[e] == '*');
  }

  std::string word() {
    const size_t b = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }

  Node primary() {
    skip();
    if (pos_ >= s_.size()) unexpected("where a value belongs");
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      Node n = expr();
      expect(')', "closes the parenthesis");
      return Node{"(" + n.text + ")", n.type};
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t at = pos_;
      const std::string w = word();
      if (sig_ == EmitSignature::Dataset && w == "x") return Node{"x", Type::Int};
      if (sig_ == EmitSignature::Dataset && w == "v") return Node{"v", Type::Double};
      if (w == "p") return param();
      pos_ = at;
      unexpected("where a value belongs");
    }
    unexpected("where a value belongs");
  }

  Node param() {
    expect('[', "follows p");
    skip();
    const size_t at = pos_;
    size_t e = pos_;
    while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
    if (e == pos_) unexpected("where a parameter index belongs (p[0], p[1], ...)");
    const std::string_view digits = s_.substr(pos_, e - pos_);
    if (digits.size() > 1 && digits[0] == '0') fail(at, "a parameter index has no leading zeros");
    int64_t k = 0;
    for (char d : digits) {
      k = k * 10 + (d - '0');
      if (k > (int64_t{1} << 31)) fail(at, "parameter index " + printable(digits) + " is out of range");
    }
    if (params_ >= 0 && k >= params_)
      fail(at, "p[" + std::to_string(k) + "] does not exist: the spec has " + std::to_string(params_) + " parameter" +
                   (params_ == 1 ? "" : "s"));
    pos_ = e;
    expect(']', "closes p[k]");
    return Node{"p[" + std::to_string(k) + "]", Type::Double};
  }

  Node number() {
    const size_t at = pos_;
    size_t i = pos_, int_digits = 0, frac_digits = 0;
    while (i < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i]))) ++i, ++int_digits;
    bool floating = false;
    if (i < s_.size() && s_[i] == '.') {
      floating = true;
      ++i;
      while (i < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i]))) ++i, ++frac_digits;
    }
    if (int_digits + frac_digits == 0) unexpected("where a value belongs");
    if (i < s_.size() && (s_[i] == 'e' || s_[i] == 'E')) {
      floating = true;
      size_t j = i + 1;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      const size_t d = j;
      while (j < s_.size() && std::isdigit(static_cast<unsigned char>(s_[j]))) ++j;
      if (j == d) fail(i, "an exponent needs digits");
      i = j;
    }
    bool is_float = false;
    if (floating && i < s_.size() && (s_[i] == 'f' || s_[i] == 'F')) is_float = true, ++i;
    if (i < s_.size() && (ident_char(s_[i]) || s_[i] == '.'))
      fail(at, "malformed number " + token_at(at) + " (decimal literals only: 2, 0.5, 1e-3, 0.5f)");
    const std::string text(s_.substr(at, i - at));
    if (!floating) {
      if (text.size() > 1 && text[0] == '0') fail(at, "integer " + text + " has a leading zero (C reads it as octal)");
      if (text.size() > 18) fail(at, "integer " + printable(text) + " is out of range (at most 18 digits)");
    } else {
      // A literal the compiler would round to infinity is refused rather than warned about.
      const std::string digits = is_float ? text.substr(0, text.size() - 1) : text;
      const double d = std::strtod(digits.c_str(), nullptr);
      if (!(is_float ? std::isfinite(static_cast<float>(d)) : std::isfinite(d)))
        fail(at, "number " + printable(text) + " is out of range");
    }
    pos_ = i;
    return Node{text, floating ? (is_float ? Type::Float : Type::Double) : Type::Int};
  }

  std::string_view s_;
  EmitSignature sig_;
  int64_t params_;
  BindLimits lim_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string parse_bind(std::string_view expr, EmitSignature signature, int64_t params, const BindLimits& limits) {
  return Parser(expr, signature, params, limits).run();
}

}  // namespace gr
