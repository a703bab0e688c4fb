#include "io/csv.h"

#include <charconv>
#include <cmath>
#include <system_error>
#include <unordered_map>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "io/limits.h"

namespace gr {

namespace {

// A cell or name quoted in a message: control bytes escaped (messages are one line) and long
// text cut, so a binary file fed in by mistake still gives a readable error.
std::string excerpt(std::string_view s, size_t max_chars = 40) {
  std::string out;
  const size_t n = s.size() < max_chars ? s.size() : max_chars;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (n < s.size()) out += "...";
  return out;
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

std::string line_place(int64_t line) { return "line " + std::to_string(line); }

// Splits one physical line into cells (quotes removed, surrounding blanks trimmed). `cells` is
// reused across rows so that short numeric cells cost no allocation (small-string storage).
void split_cells(std::string_view line, std::vector<std::string>& cells, const std::string& path, int64_t lineno) {
  size_t used = 0;
  size_t i = 0;
  while (true) {
    if (used == cells.size()) cells.emplace_back();
    std::string& cell = cells[used++];
    cell.clear();
    while (i < line.size() && is_blank(line[i])) ++i;
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {  // "" is a literal quote
            cell += '"';
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        cell += line[i++];
      }
      if (!closed)
        throw InputError(path, line_place(lineno),
                         "unterminated quote in cell " + std::to_string(used) + " (a quoted cell cannot span lines)");
      while (i < line.size() && is_blank(line[i])) ++i;
      if (i < line.size() && line[i] != ',')
        throw InputError(path, line_place(lineno),
                         "unexpected text after the closing quote of cell " + std::to_string(used));
    } else {
      const size_t start = i;
      while (i < line.size() && line[i] != ',') ++i;
      cell.assign(trim(line.substr(start, i - start)));
    }
    if (i >= line.size()) break;
    ++i;  // the comma; a trailing comma yields one more (empty) cell, as in every CSV reader
  }
  cells.resize(used);
}

// Parses one numeric cell; on failure returns the message (without the place).
bool parse_number(std::string_view text, double& out, std::string& why) {
  const std::string_view s = trim(text);  // a quoted cell may carry blanks inside the quotes
  if (s.empty()) {
    why = "empty cell; every data cell must hold a number";
    return false;
  }
  std::string_view digits = s;
  // from_chars rejects a leading '+', which spreadsheets and printf("%+g") write.
  if (digits.size() > 1 && digits[0] == '+' && digits[1] != '-' && digits[1] != '+') digits.remove_prefix(1);
  double v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, std::chars_format::general);
  if (r.ec == std::errc::invalid_argument || r.ptr != digits.data() + digits.size()) {
    why = "cell \"" + excerpt(s) + "\" is not a number";
    return false;
  }
  if (r.ec == std::errc::result_out_of_range) {
    why = "number \"" + excerpt(s) + "\" is out of the range of a double";
    return false;
  }
  if (!std::isfinite(v)) {
    why = "cell \"" + excerpt(s) + "\": NaN/inf values are not allowed in data";
    return false;
  }
  out = v;
  return true;
}

}  // namespace

int64_t CsvTable::column(std::string_view name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int64_t>(i);
  return -1;
}

CsvTable read_csv(const std::string& path) { return parse_csv(read_file(path), path); }

CsvTable parse_csv(std::string_view text, const std::string& path) {
  CsvTable t;
  t.path = path;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 BOM (Excel writes one)

  std::vector<std::string> cells;
  int64_t lineno = 0;
  int64_t header_line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty()) continue;

    split_cells(line, cells, path, lineno);
    if (header_line == 0) {
      header_line = lineno;
      const int64_t max_cols = resource_limits().csv_columns;
      if (static_cast<int64_t>(cells.size()) > max_cols)
        throw InputError(path, line_place(lineno),
                         "the header has " + std::to_string(cells.size()) + " columns, more than the limit of " +
                             std::to_string(max_cols) + " (set GRADRUN_MAX_CSV_COLUMNS to change it)");
      // A map, not a pairwise scan: a header with many columns must not take quadratic time.
      std::unordered_map<std::string_view, size_t> seen;
      for (size_t c = 0; c < cells.size(); ++c) {
        if (cells[c].empty())
          throw InputError(path, line_place(lineno),
                           "header cell " + std::to_string(c + 1) + " is empty; every column needs a name");
        const auto [it, fresh] = seen.emplace(cells[c], c);
        if (!fresh)
          throw InputError(
              path, line_place(lineno) + ", column \"" + excerpt(cells[c]) + "\"",
              "duplicate column name (columns " + std::to_string(it->second + 1) + " and " + std::to_string(c + 1) + ")");
      }
      t.header = cells;
      t.cols = static_cast<int64_t>(cells.size());
      continue;
    }

    if (cells.size() != t.header.size())
      throw InputError(path, line_place(lineno),
                       "row has " + std::to_string(cells.size()) + " cell" + (cells.size() == 1 ? "" : "s") +
                           " but the header has " + std::to_string(t.header.size()));
    if (t.values.size() + cells.size() > t.values.capacity())  // only when the table grows
      check_memory(static_cast<double>(t.values.size() + cells.size()) * 2.0 * sizeof(double), path, line_place(lineno),
                   "the table up to this row");
    for (size_t c = 0; c < cells.size(); ++c) {
      double v = 0;
      std::string why;
      if (!parse_number(cells[c], v, why))
        throw InputError(path, line_place(lineno) + ", column \"" + excerpt(t.header[c]) + "\"", why);
      t.values.push_back(v);
    }
    t.lines.push_back(lineno);
    ++t.rows;
  }

  if (header_line == 0) throw InputError(path, "line 1", "the file is empty; a header row and data rows are required");
  if (t.rows == 0) throw InputError(path, line_place(header_line), "header row but no data rows");
  return t;
}

}  // namespace gr
