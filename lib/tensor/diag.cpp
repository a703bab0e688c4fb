// diag.cpp — the spdlog logger behind diag.h: one logger, a stderr sink and an optional file sink.
#include "tensor/diag.h"

#include <memory>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "tensor/error.h"

namespace gr::diag {

namespace {

spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::Trace: return spdlog::level::trace;
    case Level::Debug: return spdlog::level::debug;
    case Level::Info: return spdlog::level::info;
    case Level::Warning: return spdlog::level::warn;
    case Level::Error: return spdlog::level::err;
  }
  return spdlog::level::info;
}

// %* in the console pattern: "warning: " for every level but info, which reads as plain text.
class LevelPrefix : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    if (msg.level == spdlog::level::info) return;
    const spdlog::string_view_t name = spdlog::level::to_string_view(msg.level);
    dest.append(name.data(), name.data() + name.size());
    dest.append(std::string_view(": "));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<LevelPrefix>(); }
};

std::shared_ptr<spdlog::sinks::sink> console_sink(Level level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<LevelPrefix>('*').set_pattern("gradrun: %*%v");
  sink->set_formatter(std::move(formatter));
  sink->set_level(to_spdlog(level));
  return sink;
}

std::shared_ptr<spdlog::logger> make_logger(std::vector<spdlog::sink_ptr> sinks) {
  auto logger = std::make_shared<spdlog::logger>("gradrun", sinks.begin(), sinks.end());
  logger->set_level(spdlog::level::trace);  // each sink filters at its own level
  logger->flush_on(spdlog::level::trace);   // diagnostics are few; a crash must not lose them
  return logger;
}

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> fallback = [] {
    auto l = make_logger({console_sink(Level::Warning)});
    spdlog::set_default_logger(l);
    return l;
  }();
  return *spdlog::default_logger_raw();
}

void emit(Level level, std::string_view message) { logger().log(to_spdlog(level), message); }

}  // namespace

bool parse_level(std::string_view word, Level& out) {
  if (word == "trace") out = Level::Trace;
  else if (word == "debug") out = Level::Debug;
  else if (word == "info") out = Level::Info;
  else if (word == "warning" || word == "warn") out = Level::Warning;
  else if (word == "error") out = Level::Error;
  else return false;
  return true;
}

const char* level_names() { return "trace, debug, info, warning, error"; }

void configure(Level console, const std::string& file, Level file_level) {
  std::vector<spdlog::sink_ptr> sinks{console_sink(console)};
  if (!file.empty()) {
    std::shared_ptr<spdlog::sinks::basic_file_sink_mt> sink;
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, /*truncate=*/false);
    } catch (const spdlog::spdlog_ex& e) {
      throw Error("--log-file " + file + ": cannot open for appending (" + e.what() + ")");
    }
    sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    sink->set_level(to_spdlog(file_level));
    sinks.push_back(sink);
  }
  logger();  // the fallback exists first, so it never replaces this one later
  spdlog::set_default_logger(make_logger(std::move(sinks)));
}

bool enabled(Level level) {
  const spdlog::logger& l = logger();
  for (const spdlog::sink_ptr& sink : l.sinks())
    if (sink->should_log(to_spdlog(level))) return true;
  return false;
}

void trace(std::string_view m) { emit(Level::Trace, m); }
void debug(std::string_view m) { emit(Level::Debug, m); }
void info(std::string_view m) { emit(Level::Info, m); }
void warn(std::string_view m) { emit(Level::Warning, m); }
void error(std::string_view m) { emit(Level::Error, m); }

}  // namespace gr::diag
