// bind_expr.h — the grammar of an `emit.bind` expression (docs/security.md, docs/emit.md).
//
// A bind is pasted into generated C source that a compiler builds (emit-cuda --verify runs it), so
// it is parsed, never trusted: anything outside this grammar is refused, and what reaches the source
// is re-printed from the parse tree, not copied from the spec.
//
//   expr    := term (('+' | '-') term)*
//   term    := unary (('*' | '/') unary)*
//   unary   := ('+' | '-') unary | '(' ('double' | 'float') ')' unary | primary
//   primary := number | 'x' | 'v' | 'p' '[' integer ']' | '(' expr ')'
//
// Names: the dataset signature defines x (long long, the example index), v (double) and p[k]; the
// params signature only p[k]. k must name a parameter. Numbers: decimal integers (no octal leading
// zeros) and decimal floating literals with an optional exponent and f suffix. Spaces and tabs
// separate tokens. Integer-only arithmetic (x + 1, 1 / 0) is refused: C would do it in long long,
// which can overflow or trap; cast to double first.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "emit/emit.h"

namespace gr {

// A refused bind: column is 1-based (bytes) in the expression as written.
class BindError : public Error {
 public:
  BindError(size_t column, const std::string& what)
      : Error("column " + std::to_string(column) + ": " + what), column_(column) {}
  size_t column() const { return column_; }

 private:
  size_t column_;
};

struct BindLimits {
  size_t max_length = 4096;  // characters
  int max_depth = 64;        // nested parentheses, casts and signs
};

// Parses `expr` for `signature` with `params` parameters (params < 0: any k up to 2^31, for
// checks before the parameter count is known) and returns its canonical re-print: tokens as
// written, one space around binary operators, the user's parentheses kept. Throws BindError.
std::string parse_bind(std::string_view expr, EmitSignature signature, int64_t params, const BindLimits& limits = {});

// Why `name` cannot be the emitted function's name, or "" when it can: a C identifier of at most 64
// characters that neither the C implementation (leading "__" or "_" + capital) nor the emitted
// definitions and harness (gr_*) reserve.
std::string function_name_problem(std::string_view name);

// A token or text as it can appear in a one-line message: control bytes and quotes escaped, long
// text cut with "...".
std::string printable(std::string_view text, size_t max_chars = 48);

}  // namespace gr
