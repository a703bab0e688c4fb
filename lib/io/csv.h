// csv.h — read a numeric CSV file with a header row into one row-major table of doubles.
//
// Accepted: a header row of unique, non-empty names, then data rows with exactly as many cells;
// comma-separated; spaces/tabs around a cell are ignored; a cell may be double-quoted ("" is a
// literal quote inside; a quoted cell may not span lines); \r\n line ends; blank lines anywhere
// are skipped; a UTF-8 byte-order mark before the header is skipped.
//
// Numbers are parsed with std::from_chars (locale-free, correctly rounded, so the 17-digit text
// of a double reads back to the same bits). A leading '+' is accepted. Rejected, each as an
// InputError placed at "line N" or "line N, column \"name\"": an empty or non-numeric cell,
// nan/inf (data must be finite), and numbers outside the double range (overflow, and underflow
// below the smallest subnormal: rounding those to ±inf/±0 would silently change the data).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gr {

struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  int64_t rows = 0, cols = 0;
  std::vector<double> values;  // row-major rows × cols
  std::vector<int64_t> lines;  // 1-based source line of each data row (for error messages)

  // Index of the column named `name`, or -1 when there is none.
  int64_t column(std::string_view name) const;
  double at(int64_t row, int64_t col) const { return values[static_cast<size_t>(row * cols + col)]; }
};

// Throws IoError when the file cannot be read, InputError (file, "line N[, column \"c\"]", what)
// when its content is not a valid numeric table. At least one data row is required.
CsvTable read_csv(const std::string& path);

// The same, from text already in memory; `path` is only used in messages and CsvTable::path.
CsvTable parse_csv(std::string_view text, const std::string& path);

}  // namespace gr
