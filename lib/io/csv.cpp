#include "io/csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unordered_map>

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

enum class NumberStatus { Ok, NotNumber, Range, NonFinite };

// Clinger's fast path: [sign] digits [. digits] with at most 19 significant digits whose value is
// below 2^53, and at most 22 digits after the point: m and 10^k are exact doubles, so m / 10^k
// (one correctly rounded division) is the correctly rounded value of the text, the same double
// from_chars gives. False: not of that form (from_chars decides).
bool fast_decimal(std::string_view s, double& out) {
  static constexpr double kPow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const char* p = s.data();
  const char* const end = p + s.size();
  bool negative = false;
  if (p < end && (*p == '-' || *p == '+')) negative = *p++ == '-';
  uint64_t m = 0;
  int digits = 0, frac = 0;
  bool any = false;
  for (; p < end && static_cast<unsigned>(*p - '0') < 10; ++p, any = true) {
    m = m * 10 + static_cast<unsigned>(*p - '0');
    digits += m != 0;
  }
  if (p < end && *p == '.') {
    ++p;
    for (; p < end && static_cast<unsigned>(*p - '0') < 10; ++p, any = true) {
      m = m * 10 + static_cast<unsigned>(*p - '0');
      digits += m != 0;
      ++frac;
    }
  }
  if (p != end || !any || digits > 19 || frac > 22 || m > (uint64_t{1} << 53)) return false;
  const double v = static_cast<double>(m) / kPow10[frac];
  out = negative ? -v : v;
  return true;
}

NumberStatus parse_double(std::string_view s, double& out) {
  if (fast_decimal(s, out)) return NumberStatus::Ok;
  // from_chars rejects a leading '+', which spreadsheets and printf("%+g") write.
  if (s.size() > 1 && s[0] == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (r.ec == std::errc::invalid_argument || r.ptr != s.data() + s.size() || s.empty()) return NumberStatus::NotNumber;
  if (r.ec == std::errc::result_out_of_range) return NumberStatus::Range;
  if (!std::isfinite(v)) return NumberStatus::NonFinite;
  out = v;
  return NumberStatus::Ok;
}

constexpr size_t kChunk = size_t{1} << 20;  // bytes read per refill

// A cell of the current record: its text in the buffer (quoted: without the quotes, doubled
// quotes not yet undone) and the line it starts on.
struct Cell {
  const char* p = nullptr;
  uint32_t n = 0;
  bool quoted = false, escapes = false;
  int64_t line = 0;
};

struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

void CsvLines::add(int64_t row, int64_t line) {
  if (!breaks_.empty() && breaks_.back().second + (row - breaks_.back().first) == line) return;
  breaks_.emplace_back(row, line);
}

bool csv_number(std::string_view text, double& out) { return parse_double(trim(text), out) == NumberStatus::Ok; }

struct CsvReader::Impl {
  std::string path;
  CsvDialect dialect;
  char delim = ',';
  bool detected = false, spaces = false;
  std::vector<std::string> header;
  int64_t header_line = 0;
  std::unordered_map<std::string, size_t, TransparentHash, std::equal_to<>> columns;
  bool blank[256] = {};     // blanks around a cell: spaces, tabs unless tab delimits
  bool na_first[256] = {};  // first bytes of the non-empty na_values
  bool na_empty = false;

  // The bytes: [begin, end) of data not yet consumed; eof once the source is exhausted.
  int fd = -1;
  std::unique_ptr<char[]> owned;
  size_t cap = 0;
  const char* data = nullptr;
  size_t begin = 0, end = 0;
  bool eof = false, memory = false;
  uint64_t total_bytes = 0, consumed = 0;  // the source's size; bytes consumed before `data`
  int64_t line = 1;                        // the line at `begin`
  bool was_read = false;

  std::vector<Cell> cells;
  std::string scratch;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  [[noreturn]] void fail(int64_t at_line, const std::string& what) const { throw InputError(path, line_place(at_line), what); }
  [[noreturn]] void fail_cell(const Cell& c, size_t col, const std::string& what) const {
    throw InputError(path, line_place(c.line) + ", column \"" + excerpt(header[col]) + "\"", what);
  }

  // Reads more bytes, keeping [begin, end). False at the end of the source.
  bool refill() {
    if (memory || eof) return false;
    if (begin > 0) {
      std::memmove(owned.get(), owned.get() + begin, end - begin);
      consumed += begin;
      end -= begin;
      begin = 0;
    }
    if (end == cap) {  // one record longer than the buffer
      check_memory(static_cast<double>(cap) * 2.0, path, line_place(line), "one row of the file");
      std::unique_ptr<char[]> bigger(new char[cap * 2]);
      std::memcpy(bigger.get(), owned.get(), end);
      owned = std::move(bigger);
      cap *= 2;
    }
    data = owned.get();
    while (true) {
      const ssize_t n = ::read(fd, owned.get() + end, cap - end);
      if (n > 0) {
        end += static_cast<size_t>(n);
        return true;
      }
      if (n == 0) {
        eof = true;
        return false;
      }
      if (errno == EINTR) continue;
      throw IoError(path, std::string("read failed: ") + std::strerror(errno));
    }
  }

  // The text of a cell with doubled quotes undone (a view into the buffer or `scratch`).
  std::string_view text_of(const Cell& c) {
    if (!c.escapes) return {c.p, c.n};
    scratch.clear();
    for (uint32_t i = 0; i < c.n; ++i) {
      scratch += c.p[i];
      if (c.p[i] == dialect.quote) ++i;  // the second quote of a pair
    }
    return scratch;
  }

  bool is_na(std::string_view s) const {
    if (s.empty()) return na_empty;
    if (!na_first[static_cast<unsigned char>(s[0])]) return false;
    for (const std::string& na : dialect.na_values)
      if (na == s) return true;
    return false;
  }

  enum class Record { Row, Blank, End, More };

  // Splits the record at `begin` into `cells`. More: the buffer ends before the record does (and
  // the source has more). Consumes the record (begin, line) unless More.
  Record split() {
    const char* const base = data;
    const char* p = base + begin;
    const char* const stop = base + end;
    if (p == stop) return eof || memory ? Record::End : Record::More;
    const char q = dialect.quote;
    int64_t at_line = line;
    // The end of the physical line: the record ends there unless a quote spans it.
    const char* le = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(stop - p)));
    if (!le && !(eof || memory)) return Record::More;
    if (!le) le = stop;
    // A blank line (blanks and a \r only) is skipped.
    {
      const char* s = p;
      while (s < le && (*s == ' ' || *s == '\t' || *s == '\r')) ++s;
      if (s == le) {
        begin = static_cast<size_t>((le == stop ? le : le + 1) - base);
        line += 1;
        return Record::Blank;
      }
    }
    size_t used = 0;
    auto next_cell = [&]() -> Cell& {
      if (used == cells.size()) cells.emplace_back();
      return cells[used++];
    };
    if (spaces)
      while (p < le && is_blank(*p)) ++p;
    while (true) {
      while (p < le && blank[static_cast<unsigned char>(*p)]) ++p;
      Cell& c = next_cell();
      c.line = at_line;
      c.escapes = false;
      if (p < le && *p == q) {  // a quoted cell: to the closing quote, across lines if need be
        const char* s = p + 1;
        const char* r = s;
        while (true) {
          const char* hit = static_cast<const char*>(std::memchr(r, q, static_cast<size_t>(stop - r)));
          if (!hit) {
            if (!(eof || memory)) return Record::More;
            fail(c.line, "unterminated quote in cell " + std::to_string(used) + " (it runs to the end of the file)");
          }
          if (hit + 1 == stop && !(eof || memory)) return Record::More;  // a doubled quote may follow
          if (hit + 1 < stop && hit[1] == q) {
            c.escapes = true;
            r = hit + 2;
            continue;
          }
          for (const char* t = s; t < hit; ++t) at_line += *t == '\n';
          c.p = s;
          c.n = static_cast<uint32_t>(hit - s);
          c.quoted = true;
          p = hit + 1;
          break;
        }
        if (p > le) {  // the quote spanned line ends: the record now ends at the next one
          le = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(stop - p)));
          if (!le && !(eof || memory)) return Record::More;
          if (!le) le = stop;
        }
        while (p < le && blank[static_cast<unsigned char>(*p)]) ++p;
        if (p < le && *p == '\r' && p + 1 == le) ++p;
        if (p < le && !(spaces ? is_blank(*p) : *p == delim))
          fail(at_line, "unexpected text after the closing quote of cell " + std::to_string(used));
      } else {
        const char* s = p;
        if (spaces) {
          while (p < le && !is_blank(*p)) ++p;
        } else {
          const char d = delim;
          while (p < le && *p != d) ++p;
        }
        const char* e = p;
        if (e == le && e > s && e[-1] == '\r') --e;
        while (e > s && blank[static_cast<unsigned char>(e[-1])]) --e;
        c.p = s;
        c.n = static_cast<uint32_t>(e - s);
        c.quoted = false;
      }
      if (p >= le) break;
      // At a delimiter.
      if (spaces) {
        while (p < le && is_blank(*p)) ++p;
        if (p == le || (*p == '\r' && p + 1 == le)) break;  // trailing blanks are no cell
      } else {
        ++p;  // a trailing delimiter yields one more (empty) cell, as in every CSV reader
      }
    }
    cells.resize(used);
    begin = static_cast<size_t>((le == stop ? le : le + 1) - base);
    line = at_line + 1;
    return Record::Row;
  }

  Record next() {
    while (true) {
      const Record r = split();
      if (r != Record::More) return r;
      if (!refill()) eof = true;
    }
  }

  // The first line of the file (outside quotes) decides the delimiter.
  void detect() {
    while (true) {
      const char* p = data + begin;
      const char* stop = data + end;
      // Skip blank lines.
      const char* s = p;
      while (s < stop && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')) ++s;
      bool in_quote = false, at_cell_start = true, complete = false;
      int64_t counts[4] = {0, 0, 0, 0};
      static const char kCandidates[4] = {',', ';', '\t', '|'};
      bool inner_blanks = false;
      const char* t = s;
      for (; t < stop; ++t) {
        const char c = *t;
        if (in_quote) {
          if (c == dialect.quote) {
            if (t + 1 < stop && t[1] == dialect.quote) ++t;
            else in_quote = false;
          }
          continue;
        }
        if (c == '\n') {
          complete = true;
          break;
        }
        if (c == dialect.quote && at_cell_start) {
          in_quote = true;
          continue;
        }
        at_cell_start = false;
        for (int k = 0; k < 4; ++k)
          if (c == kCandidates[k]) ++counts[k], at_cell_start = true;
        if (is_blank(c)) at_cell_start = true;
      }
      if (!complete && !(eof || memory) && refill()) continue;
      // Blanks between names (not at the line's ends) make a space-separated header.
      const std::string_view first(s, static_cast<size_t>(t - s));
      const std::string_view inner = trim(first.substr(0, first.size() - (first.ends_with('\r') ? 1 : 0)));
      for (char c : inner) inner_blanks = inner_blanks || is_blank(c);
      int best = -1;
      for (int k = 0; k < 4; ++k)
        if (counts[k] > 0 && (best < 0 || counts[k] > counts[best])) best = k;
      delim = best >= 0 ? kCandidates[best] : inner_blanks ? ' ' : ',';
      return;
    }
  }

  void setup_tables() {
    spaces = delim == ' ';
    blank[static_cast<unsigned char>(' ')] = delim != ' ';
    blank[static_cast<unsigned char>('\t')] = delim != '\t' && delim != ' ';
    for (const std::string& na : dialect.na_values) {
      if (na.empty()) na_empty = true;
      else na_first[static_cast<unsigned char>(na[0])] = true;
    }
  }

  void start() {
    if (end - begin >= 3 && std::memcmp(data + begin, "\xEF\xBB\xBF", 3) == 0) begin += 3;  // UTF-8 BOM (Excel writes one)
    if (dialect.quote != '"' && dialect.quote != '\'')
      throw InputError(path, "", std::string("unsupported quote character '") + dialect.quote + "'");
    if (dialect.delimiter == 0) {
      detect();
      detected = true;
    } else {
      delim = dialect.delimiter;
    }
    setup_tables();
    Record r;
    while ((r = next()) == Record::Blank) {
    }
    if (r == Record::End) throw InputError(path, "line 1", "the file is empty; a header row and data rows are required");
    header_line = cells.empty() ? line : cells.front().line;
    const int64_t max_cols = resource_limits().csv_columns;
    if (static_cast<int64_t>(cells.size()) > max_cols)
      throw InputError(path, line_place(header_line),
                       "the header has " + std::to_string(cells.size()) + " columns, more than the limit of " +
                           std::to_string(max_cols) + " (set GRADRUN_MAX_CSV_COLUMNS to change it)");
    header.reserve(cells.size());
    for (const Cell& c : cells) header.emplace_back(text_of(c));
    // A map, not a pairwise scan: a header with many columns must not take quadratic time.
    for (size_t c = 0; c < header.size(); ++c) {
      if (header[c].empty())
        throw InputError(path, line_place(header_line), "header cell " + std::to_string(c + 1) + " is empty; every column needs a name");
      const auto [it, fresh] = columns.emplace(header[c], c);
      if (!fresh)
        throw InputError(path, line_place(header_line) + ", column \"" + excerpt(header[c]) + "\"",
                         "duplicate column name (columns " + std::to_string(it->second + 1) + " and " + std::to_string(c + 1) + ")");
    }
  }

  // A missing cell where none is allowed: the message a numeric table has always given, and the advice.
  [[noreturn]] void fail_missing(const Cell& c, size_t col, std::string_view s, const CsvField& f) const {
    std::string what = f.text      ? (s.empty() ? "empty cell" : "cell \"" + excerpt(s) + "\" is one of the na_values")
                       : s.empty() ? "empty cell; every data cell must hold a number"
                       : s == "nan" || s == "NaN" ? "cell \"" + excerpt(s) + "\": NaN/inf values are not allowed in data"
                                                  : "cell \"" + excerpt(s) + "\" is not a number";
    what += " (a missing value";
    what += f.missing_hint.empty() ? ")" : ": " + f.missing_hint + ")";
    fail_cell(c, col, what);
  }

  double number_cell(const Cell& c, const CsvField& f) {
    std::string_view s = text_of(c);
    if (c.quoted) s = trim(s);  // a quoted number may carry blanks inside the quotes
    if (is_na(s)) {
      if (!f.missing_ok) fail_missing(c, static_cast<size_t>(f.column), s, f);
      return std::numeric_limits<double>::quiet_NaN();
    }
    double v = 0;
    switch (parse_double(s, v)) {
      case NumberStatus::Ok: return v;
      case NumberStatus::NotNumber:
        if (s.empty()) fail_cell(c, static_cast<size_t>(f.column), "empty cell; every data cell must hold a number");
        fail_cell(c, static_cast<size_t>(f.column), "cell \"" + excerpt(s) + "\" is not a number");
      case NumberStatus::Range:
        fail_cell(c, static_cast<size_t>(f.column), "number \"" + excerpt(s) + "\" is out of the range of a double");
      case NumberStatus::NonFinite:
        fail_cell(c, static_cast<size_t>(f.column), "cell \"" + excerpt(s) + "\": NaN/inf values are not allowed in data");
    }
    return 0;
  }

  CsvData read(const std::vector<std::vector<CsvField>>& groups) {
    if (was_read) throw Error("CsvReader::read: the rows were read already");
    was_read = true;
    CsvData out;
    out.groups.resize(groups.size());
    out.texts.resize(groups.size());
    using Dict = std::unordered_map<std::string, double, TransparentHash, std::equal_to<>>;
    std::vector<std::vector<Dict>> dicts(groups.size());
    size_t width = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      out.texts[g].resize(groups[g].size());
      dicts[g].resize(groups[g].size());
      width += groups[g].size();
      for (const CsvField& f : groups[g])
        if (f.column < 0 || f.column >= static_cast<int64_t>(header.size())) throw Error("CsvReader::read: no column " + std::to_string(f.column));
    }
    const size_t ncols = header.size();
    int64_t rows = 0;
    size_t reserved_rows = 0;
    const uint64_t start_offset = consumed + begin;  // where the data rows start
    while (true) {
      const Record r = next();
      if (r == Record::End) break;
      if (r == Record::Blank) continue;
      if (cells.size() != ncols)
        fail(cells.front().line, "row has " + std::to_string(cells.size()) + " cell" + (cells.size() == 1 ? "" : "s") +
                                     " but the header has " + std::to_string(ncols));
      if (static_cast<size_t>(rows) == reserved_rows && width > 0) {
        // Room for the rows still to come, estimated from the bytes per row of the first 1024 (an
        // overestimate costs address space only: pages are touched as rows arrive).
        const double row_bytes = static_cast<double>(width) * sizeof(double);
        check_memory(static_cast<double>(rows + 1) * row_bytes, path, line_place(cells.front().line), "the table up to this row");
        double want = 1024;
        if (rows >= 1024) {
          const double done = static_cast<double>(consumed + begin - start_offset);
          const double left = std::max(0.0, static_cast<double>(total_bytes) - static_cast<double>(consumed + begin));
          want = std::max(static_cast<double>(rows) + left / (done / static_cast<double>(rows)) * 1.05 + 64,
                          static_cast<double>(rows) * 1.5);
        }
        want = std::min(want, std::max(static_cast<double>(rows + 1), static_cast<double>(resource_limits().memory_bytes) / row_bytes));
        reserved_rows = static_cast<size_t>(want);
        for (size_t g = 0; g < groups.size(); ++g) out.groups[g].reserve(reserved_rows * groups[g].size());
      }
      out.lines.add(rows, cells.front().line);
      for (size_t g = 0; g < groups.size(); ++g) {
        std::vector<double>& dst = out.groups[g];
        const std::vector<CsvField>& fields = groups[g];
        for (size_t k = 0; k < fields.size(); ++k) {
          const CsvField& f = fields[k];
          const Cell& c = cells[static_cast<size_t>(f.column)];
          if (!f.text) {
            dst.push_back(number_cell(c, f));
            continue;
          }
          const std::string_view s = text_of(c);
          if (is_na(c.quoted ? trim(s) : s)) {
            if (!f.missing_ok) fail_missing(c, static_cast<size_t>(f.column), s, f);
            dst.push_back(std::numeric_limits<double>::quiet_NaN());
            continue;
          }
          Dict& dict = dicts[g][k];
          auto it = dict.find(s);
          if (it == dict.end()) {
            std::vector<std::string>& names = out.texts[g][k];
            it = dict.emplace(std::string(s), static_cast<double>(names.size())).first;
            names.emplace_back(s);
          }
          dst.push_back(it->second);
        }
      }
      ++rows;
    }
    if (rows == 0) fail(header_line, "header row but no data rows");
    out.rows = rows;
    return out;
  }
};

CsvReader::CsvReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CsvReader::CsvReader(CsvReader&&) noexcept = default;
CsvReader& CsvReader::operator=(CsvReader&&) noexcept = default;
CsvReader::~CsvReader() = default;

CsvReader CsvReader::open(const std::string& path, const CsvDialect& dialect) {
  auto m = std::make_unique<Impl>();
  m->path = path;
  m->dialect = dialect;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw IoError(path, "is a directory, not a file");
  m->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (m->fd < 0) throw IoError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(m->fd, &st) == 0) m->total_bytes = static_cast<uint64_t>(st.st_size);
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(m->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  m->cap = kChunk;
  m->owned.reset(new char[m->cap]);
  m->data = m->owned.get();
  m->refill();
  m->start();
  return CsvReader(std::move(m));
}

CsvReader CsvReader::over(std::string_view text, const std::string& path, const CsvDialect& dialect) {
  auto m = std::make_unique<Impl>();
  m->path = path;
  m->dialect = dialect;
  m->memory = true;
  m->eof = true;
  m->data = text.data();
  m->end = text.size();
  m->total_bytes = text.size();
  m->start();
  return CsvReader(std::move(m));
}

const std::string& CsvReader::path() const { return impl_->path; }
const std::vector<std::string>& CsvReader::header() const { return impl_->header; }
int64_t CsvReader::header_line() const { return impl_->header_line; }
char CsvReader::delimiter() const { return impl_->delim; }
bool CsvReader::delimiter_detected() const { return impl_->detected; }
int64_t CsvReader::column(std::string_view name) const {
  const auto it = impl_->columns.find(name);
  return it == impl_->columns.end() ? -1 : static_cast<int64_t>(it->second);
}
CsvData CsvReader::read(const std::vector<std::vector<CsvField>>& groups) { return impl_->read(groups); }

std::string csv_cell(const std::string& v) {
  const bool plain = !v.empty() && v.find_first_of(",;\t|\"'\r\n") == std::string::npos && v.front() != ' ' && v.back() != ' ';
  if (plain) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace gr
