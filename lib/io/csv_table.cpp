// csv_table.cpp — the parts of io/csv.h built on CsvReader's public interface: the dialect's
// defaults, delimiter names, CsvLines' lookups (row → line; `add`, called per row, stays with the
// reader), and whole-table reading (read_csv, parse_csv).
// The reader itself (the hot path) is csv.cpp.
#include <algorithm>

#include "io/csv.h"

namespace gr {

std::vector<std::string> CsvDialect::default_na_values() { return {"", "NA", "N/A", "NaN", "nan", "null", "?"}; }

std::string describe_delimiter(char d) {
  switch (d) {
    case '\t': return "'\\t'";
    case ' ': return "' ' (runs of spaces)";
    default: return std::string("'") + d + "'";
  }
}

int64_t CsvLines::line(int64_t row) const {
  auto it = std::upper_bound(breaks_.begin(), breaks_.end(), row, [](int64_t r, const auto& b) { return r < b.first; });
  if (it == breaks_.begin()) return row + 1;
  --it;
  return it->second + (row - it->first);
}

std::vector<int64_t> CsvLines::all(int64_t rows) const {
  std::vector<int64_t> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) out[static_cast<size_t>(r)] = line(r);
  return out;
}

int64_t CsvTable::column(std::string_view name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int64_t>(i);
  return -1;
}

namespace {

CsvTable whole_table(CsvReader& r) {
  CsvTable t;
  t.path = r.path();
  t.header = r.header();
  t.cols = static_cast<int64_t>(t.header.size());
  std::vector<CsvField> fields(t.header.size());
  for (size_t c = 0; c < fields.size(); ++c) fields[c].column = static_cast<int64_t>(c);
  CsvData d = r.read({fields});
  t.rows = d.rows;
  t.values = std::move(d.groups[0]);
  t.lines = d.lines.all(d.rows);
  return t;
}

}  // namespace

CsvTable read_csv(const std::string& path, const CsvDialect& dialect) {
  CsvReader r = CsvReader::open(path, dialect);
  return whole_table(r);
}

CsvTable parse_csv(std::string_view text, const std::string& path, const CsvDialect& dialect) {
  CsvReader r = CsvReader::over(text, path, dialect);
  return whole_table(r);
}

}  // namespace gr
