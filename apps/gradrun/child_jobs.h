// child_jobs.h — commands that run other gradrun commands (regress, cv, sweep): this executable
// run again as child processes, at most N at a time, each with its output in a log file.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace gr::cli {

// This gradrun's own executable (/proc/self/exe).
std::string gradrun_executable();

struct ChildJob {
  std::vector<std::string> argv;  // argv[0]: the executable
  std::string log;                // stdout and stderr go here (truncated first)
  std::string cwd = "";           // the child's working folder (empty: this one's); argv paths are relative to it
  int code = -1;                  // the exit status; 128 + the signal when killed by one
  double seconds = 0.0;           // wall time
};

// Runs the jobs, at most `n` at a time, in index order of start; `started(i)` is called as each
// one starts and `done(i)` as each one ends (in this process, in the order they end).
void run_children(std::vector<ChildJob>& jobs, int n, const std::function<void(size_t)>& done = {},
                  const std::function<void(size_t)>& started = {});

// The log's error lines (gradrun's "error:" lines, joined by " | "), else its last line.
std::string child_log_detail(const std::string& log);

}  // namespace gr::cli

namespace gr::cli {

// One `gradrun train` of a batch (cv's folds, a sweep's runs): SPEC trained into `dir` with the
// command's --set items and then `sets`.
struct Training {
  std::string dir;
  std::vector<std::string> sets;  // appended to the command line's --set items
  std::vector<std::string> overrides{};  // filled by run_trainings: every --set item, in order
  bool skipped = false;  // finished earlier: not rerun
  int code = 0;
  std::string log{};
};

// A run folder is finished when its run.json says status "complete" and its overrides are exactly
// `overrides` (train writes run.json last, atomically, once every other file is written).
bool training_finished(const std::string& dir, const std::vector<std::string>& overrides);

// Trains every run not finished, at most `jobs` at a time (each child with the default --threads
// auto, so that the runs' files do not depend on --jobs) with their output in LOGS/<name>.log; `done(i)` after each one ends
// (also for skipped ones, first), `started(i)` as one starts. Returns the number of failed runs.
int run_trainings(const std::string& spec, std::vector<Training>& runs, int jobs, const std::string& logs,
                  const std::function<void(size_t)>& done, const std::function<void(size_t)>& started = {});

// The --set items of this command line (every subcommand has the flag; main.cpp).
const std::vector<std::string>& command_line_sets();

}  // namespace gr::cli
