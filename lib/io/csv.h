// csv.h — read a CSV file with a header row: the columns a caller asks for, as numbers or as text.
//
// Dialect (CsvDialect; the spec's data.delimiter, data.quote, data.na_values, docs/spec.md):
//   - delimiter ',', ';', '\t' or '|', or ' ' for runs of spaces and tabs (leading and trailing
//     blanks of a line are then no cells); 0: detected from the header line — the candidate
//     among , ; \t | that occurs most often outside quotes (ties in that order), else ' ' when the
//     header holds blanks between names, else ',';
//   - RFC 4180 quoting with `quote` ('"' by default, or '\''): a cell that starts with the quote
//     (after blanks) runs to the closing quote; a doubled quote inside is one literal quote;
//     delimiters and line breaks inside are text (a quoted cell may span lines); after the closing
//     quote only blanks may come before the next delimiter. A quote elsewhere is a plain character.
//     Quoted header names are unquoted like any cell;
//   - blanks (spaces, tabs unless tab is the delimiter) around an unquoted cell are ignored; a
//     quoted cell keeps its text (numbers still parse with blanks inside the quotes); \r\n line ends;
//     blank lines anywhere are skipped; a UTF-8 byte-order mark before the header is skipped;
//   - na_values: a cell whose text (after unquoting and trimming) is one of them is missing. Default
//     {"", "NA", "N/A", "NaN", "nan", "null", "?"}.
//
// Numbers are parsed with std::from_chars (locale-free, correctly rounded, so the 17-digit text
// of a double reads back to the same bits). A leading '+' is accepted. Rejected, each as an
// InputError placed at "line N" or "line N, column \"name\"" (N: the line where the row or cell
// starts): a non-numeric cell, inf (data must be finite; "nan" is missing by default, a NaN cell
// that is not an na_value is refused), numbers outside the double range (overflow, and underflow
// below the smallest subnormal: rounding those to ±inf/±0 would silently change the data), and a
// missing cell in a field that does not accept one.
//
// The file is read in chunks (never whole), and each requested group of fields is written straight
// into its own row-major buffer, so reading a table costs about the size of its numbers in memory.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gr {

struct CsvDialect {
  char delimiter = 0;  // ',' ';' '\t' '|', ' ' (runs of blanks); 0: detect from the header line
  char quote = '"';
  std::vector<std::string> na_values = default_na_values();
  static std::vector<std::string> default_na_values();
};

// How a delimiter is written in messages and the spec: "','", "'\\t'", "' ' (runs of spaces)".
std::string describe_delimiter(char delimiter);

// A cell gradrun writes into a CSV (predictions, generated tokens): quoted (RFC 4180, "" for a quote)
// when it holds a delimiter any reader might guess, a quote, a line break or edge blanks; else as is.
std::string csv_cell(const std::string& v);

// The 1-based source line of each data row, kept as breakpoints (a row whose line is not the line
// after the previous row's last line starts a new one), so a million rows cost a few entries.
class CsvLines {
 public:
  int64_t line(int64_t row) const;
  void add(int64_t row, int64_t line);  // rows in ascending order
  std::vector<int64_t> all(int64_t rows) const;

 private:
  std::vector<std::pair<int64_t, int64_t>> breaks_;  // (first row, its line)
};

// One field of a group: a column of the file, read as a number or kept as text.
struct CsvField {
  int64_t column = 0;
  bool text = false;         // text: the value is a code into the field's dictionary (CsvData::texts)
  bool missing_ok = false;   // a missing cell (na_values) is NaN; otherwise it is an error ...
  std::string missing_hint;  // ... whose message ends with this advice (may be empty)
};

struct CsvData {
  int64_t rows = 0;
  // Per group: rows × fields values, row-major. A text field's value is the index of its text in
  // texts[group][field] (first appearance order); a missing cell is NaN.
  std::vector<std::vector<double>> groups;
  std::vector<std::vector<std::vector<std::string>>> texts;
  CsvLines lines;
};

class CsvReader {
 public:
  // Opens `path` and reads up to and including the header. IoError when the file cannot be read,
  // InputError on an empty file or a bad header.
  static CsvReader open(const std::string& path, const CsvDialect& dialect);
  // The same over text in memory (not copied: it must outlive the reader); `path` names it in messages.
  static CsvReader over(std::string_view text, const std::string& path, const CsvDialect& dialect);
  CsvReader(CsvReader&&) noexcept;
  CsvReader& operator=(CsvReader&&) noexcept;
  ~CsvReader();

  const std::string& path() const;
  const std::vector<std::string>& header() const;
  int64_t header_line() const;
  char delimiter() const;
  bool delimiter_detected() const;  // the dialect left it to the header
  int64_t column(std::string_view name) const;  // -1 when absent

  // Reads every data row (once) into the requested groups. At least one data row is required.
  CsvData read(const std::vector<std::vector<CsvField>>& groups);

  struct Impl;

 private:
  explicit CsvReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- the whole table as numbers (tests, the fuzz harness, simple tools) ----------------------

struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // row-major rows × cols; a missing cell is an error
  std::vector<int64_t> lines;  // 1-based source line of each data row (for error messages)

  // Index of the column named `name`, or -1 when there is none.
  int64_t column(std::string_view name) const;
  double at(int64_t row, int64_t col) const { return values[static_cast<size_t>(row * cols + col)]; }
};

// Throws IoError when the file cannot be read, InputError (file, "line N[, column \"c\"]", what)
// when its content is not a valid numeric table. At least one data row is required.
CsvTable read_csv(const std::string& path, const CsvDialect& dialect = {});

// The same, from text already in memory; `path` is only used in messages and CsvTable::path.
CsvTable parse_csv(std::string_view text, const std::string& path, const CsvDialect& dialect = {});

// A cell's text as a number the way the reader parses it (blanks around it ignored, a leading '+'
// accepted, finite doubles only); false when it is not one.
bool csv_number(std::string_view text, double& out);

}  // namespace gr
