// libFuzzer harness: the CSV reader. A gr::Error is a clean refusal; anything else is a finding.
// The first byte picks the dialect (delimiter detected or one of , ; \t | ' ', quote " or '); the
// text is read as a numeric table and again with every column kept as text, missing cells allowed.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/csv.h"
#include "tensor/shape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char kDelims[] = {0, ',', ';', '\t', '|', ' '};
  gr::CsvDialect dialect;
  dialect.delimiter = kDelims[data[0] % 6];
  dialect.quote = (data[0] / 6) % 2 ? '\'' : '"';
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const gr::CsvTable t = gr::parse_csv(text, "fuzz.csv", dialect);
    if (t.values.size() != static_cast<size_t>(t.rows * t.cols)) __builtin_trap();
    if (t.lines.size() != static_cast<size_t>(t.rows)) __builtin_trap();
  } catch (const gr::Error&) {
  }
  try {
    gr::CsvReader r = gr::CsvReader::over(text, "fuzz.csv", dialect);
    std::vector<gr::CsvField> fields(r.header().size());
    for (size_t c = 0; c < fields.size(); ++c) fields[c] = {static_cast<int64_t>(c), c % 2 == 0, true, ""};
    const gr::CsvData d = r.read({fields});
    if (d.groups[0].size() != static_cast<size_t>(d.rows) * fields.size()) __builtin_trap();
    for (size_t i = 0; i < d.groups[0].size(); ++i) {
      const double v = d.groups[0][i];
      const size_t c = i % fields.size();
      if (fields[c].text && v == v && !(v >= 0 && v < static_cast<double>(d.texts[0][c].size()))) __builtin_trap();
    }
  } catch (const gr::Error&) {
  }
  return 0;
}
