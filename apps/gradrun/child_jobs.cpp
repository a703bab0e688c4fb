// child_jobs.cpp — see child_jobs.h.
#include "child_jobs.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "io/atomic_file.h"
#include "io/errors.h"

namespace gr::cli {

std::string gradrun_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("cannot find the gradrun executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

namespace {

pid_t spawn_child(const std::vector<std::string>& argv, const std::string& log, const std::string& cwd) {
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork failed: cannot start " + (argv.empty() ? std::string("a child") : argv[0]));
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

void run_children(std::vector<ChildJob>& jobs, int n, const std::function<void(size_t)>& done,
                  const std::function<void(size_t)>& started) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::pair<pid_t, size_t>> running;
  std::vector<Clock::time_point> start(jobs.size());
  size_t next = 0;
  while (next < jobs.size() || !running.empty()) {
    while (next < jobs.size() && static_cast<int>(running.size()) < std::max(n, 1)) {
      start[next] = Clock::now();
      running.emplace_back(spawn_child(jobs[next].argv, jobs[next].log, jobs[next].cwd), next);
      if (started) started(next);
      ++next;
    }
    int status = 0;
    const pid_t ended = wait(&status);
    if (ended < 0) {
      if (errno == EINTR) continue;
      throw Error("waiting for a child process failed");
    }
    for (size_t i = 0; i < running.size(); ++i) {
      if (running[i].first != ended) continue;
      const size_t k = running[i].second;
      ChildJob& j = jobs[k];
      j.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      j.seconds = std::chrono::duration<double>(Clock::now() - start[k]).count();
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      if (done) done(k);
      break;
    }
  }
}

std::string child_log_detail(const std::string& log) {
  std::string s, last;
  try {
    const std::string text = read_file(log);
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(start, end - start);
      if (line.find("error: ") != std::string::npos) s += (s.empty() ? "" : " | ") + line.substr(line.find("error: ") + 7);
      if (!line.empty()) last = line;
      start = end + 1;
    }
  } catch (const std::exception&) {
  }
  return s.empty() ? last : s;
}

}  // namespace gr::cli

namespace gr::cli {

bool training_finished(const std::string& dir, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/run.json", ec)) return false;
  try {
    const nlohmann::json run = nlohmann::json::parse(read_file(dir + "/run.json"));
    if (run.value("status", std::string()) != "complete" || !run.contains("overrides")) return false;
    // The run's overrides begin with these (a "balanced" class weight appends its resolved list).
    const std::vector<std::string> had = run["overrides"].get<std::vector<std::string>>();
    return had.size() >= overrides.size() && std::equal(overrides.begin(), overrides.end(), had.begin());
  } catch (const std::exception&) {
    return false;
  }
}

int run_trainings(const std::string& spec, std::vector<Training>& runs, int jobs, const std::string& logs,
                  const std::function<void(size_t)>& done, const std::function<void(size_t)>& started) {
  const std::string exe = gradrun_executable();
  std::filesystem::create_directories(logs);
  std::vector<ChildJob> children;
  std::vector<size_t> index;  // children[k] trains runs[index[k]]
  for (size_t i = 0; i < runs.size(); ++i) {
    Training& t = runs[i];
    t.overrides = command_line_sets();
    t.overrides.insert(t.overrides.end(), t.sets.begin(), t.sets.end());
    t.log = logs + "/" + std::filesystem::path(t.dir).filename().string() + ".log";
    if (training_finished(t.dir, t.overrides)) {
      t.skipped = true;
      continue;
    }
    ChildJob c;
    c.argv = {exe, "train", spec, "--out", t.dir, "--quiet"};
    for (const std::string& s : t.overrides) c.argv.insert(c.argv.end(), {"--set", s});
    c.log = t.log;
    children.push_back(std::move(c));
    index.push_back(i);
  }
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].skipped && done) done(i);
  int failed = 0;
  run_children(
      children, jobs,
      [&](size_t k) {
        Training& t = runs[index[k]];
        t.code = children[k].code;
        if (t.code != 0) ++failed;
        if (done) done(index[k]);
      },
      [&](size_t k) {
        if (started) started(index[k]);
      });
  return failed;
}

}  // namespace gr::cli
