// diag.h — diagnostics: warnings, device choice, compile-cache hits, timings (issue 14 item 8).
//
// Results (loss lines, tables, the progress bar) are not diagnostics: they go to stdout as before.
// Diagnostics go through spdlog, configured once by the command line (`--log-level`, `--log-file`,
// `--quiet`); only diag.cpp includes spdlog, so the rest of the library sees four functions.
// Console lines read "gradrun: MESSAGE" (info) or "gradrun: LEVEL: MESSAGE" on stderr; the log file
// adds a timestamp to every line. Before configure() runs (tests, library use) the console gets
// warnings and errors only.
#pragma once
#include <string>
#include <string_view>

namespace gr::diag {

enum class Level { Trace, Debug, Info, Warning, Error };

// "trace" | "debug" | "info" | "warning" (or "warn") | "error"; false for any other word.
bool parse_level(std::string_view word, Level& out);
const char* level_names();  // "trace, debug, info, warning, error", for help and error text

// Console at `console` (stderr), and when `file` is not empty also that file (appended, created
// when missing) at `file_level`. Throws gr::Error when the file cannot be opened.
void configure(Level console, const std::string& file, Level file_level);

// Whether a message at `level` goes anywhere: to skip building one in a loop.
bool enabled(Level level);

void trace(std::string_view message);
void debug(std::string_view message);
void info(std::string_view message);
void warn(std::string_view message);
void error(std::string_view message);

}  // namespace gr::diag
