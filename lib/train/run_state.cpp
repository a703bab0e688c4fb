#include "train/run_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "spec/json_reader.h"
#include "tensor/sha256.h"
#include "train/run_model.h"

namespace gr {

namespace {

volatile std::sig_atomic_t g_signals = 0;
struct sigaction g_old_int, g_old_term;

extern "C" void on_stop_signal(int sig) {
  const std::sig_atomic_t n = static_cast<std::sig_atomic_t>(g_signals + 1);
  g_signals = n;
  if (n == 2) {  // the stop is under way: say so, and let the checkpoint reach the disk
    static const char note[] = "\ngradrun: stopping: writing the checkpoint; a third signal ends the process at once\n";
    const ssize_t w = ::write(STDERR_FILENO, note, sizeof note - 1);
    (void)w;
    return;
  }
  if (n >= 3) {  // the third one: stop now (the default action); files are renamed whole
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);  // delivered when the handler returns (the signal is blocked inside it)
  }
}

// The gradrun files of a run folder (docs/cli.md, train).
constexpr const char* kRunFiles[] = {"run.json", "loss.csv", "metrics.csv", "loss.svg", "weights.safetensors",
                                     "weights.best.safetensors", "init.safetensors", "spec.json", "receipt.json", "checkpoint",
                                     "vocab.json"};

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signals = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

bool InterruptGuard::requested() { return g_signals != 0; }

std::string run_identity(const Model& model) {
  const Spec& spec = model.spec();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(spec.text);  // whitespace does not count; sorted_keys() below: key order neither
  for (const char* k : {"name", "output", "device", "metrics", "predict", "description"}) j.erase(k);
  if (j.contains("data") && j["data"].is_object())  // where the files lie does not count, their rows do (data_sha256)
    for (const char* k : {"csv", "safetensors", "npy", "npz"})
      if (j["data"].contains(k)) j["data"][k] = "file";
  j["seed"] = spec.seed;
  const OptimizerSpec& o = spec.optimizer;
  nlohmann::ordered_json& opt = j["optimizer"] = nlohmann::ordered_json::object();
  opt["kind"] = o.kind;
  opt["lr"] = o.lr;
  opt["clip"] = o.clip;
  opt["l2"] = o.l2_default;
  for (const auto& [name, l2] : o.l2) opt["l2_params"][name] = l2;
  opt["beta1"] = o.beta1;
  opt["beta2"] = o.beta2;
  opt["eps"] = o.eps;
  opt["weight_decay"] = o.weight_decay;
  opt["momentum"] = o.momentum;
  opt["nesterov"] = o.nesterov;
  if (const auto& s = o.schedule)  // every field: each changes the rates of finished steps
    opt["schedule"] = {{"kind", s->kind}, {"every", s->every},   {"gamma", s->gamma},
                       {"min_lr", s->min_lr}, {"epochs", s->epochs}, {"warmup", {{"steps", s->warmup_steps}}}};
  nlohmann::ordered_json& train = j["train"] = nlohmann::ordered_json::object();
  train["batch_size"] = spec.train.batch_size;
  train["shuffle"] = spec.train.shuffle;
  train["drop_last"] = spec.train.drop_last;
  // The shards change every step's sums; the process count does not (docs/distributed.md). Only
  // S > 1 is written, so runs from before train.shards keep their identity.
  if (spec.train.shards > 1) train["shards"] = spec.train.shards;
  Sha256 h;
  for (const DataTable* t : {&model.data().train, &model.data().validation})
    for (const Tensor& x : t->tensors) h.update(x.data(), static_cast<size_t>(x.numel()) * sizeof(double));
  j["data_sha256"] = h.hex();
  // Weights and consts loaded from files: their bytes count, not where they lie (only when there
  // are any, so identities of runs without them stay what they were).
  if (!spec.tensor_files.empty())
    for (const TensorFileRecord& f : spec.tensor_files) j["init_files_sha256"].push_back(f.sha256);
  return sorted_keys(j).dump();
}

std::string identity_difference(const std::string& before, const std::string& now, std::string* pointer) {
  nlohmann::ordered_json a, b;
  try {
    a = nlohmann::ordered_json::parse(before);
    b = nlohmann::ordered_json::parse(now);
  } catch (const nlohmann::ordered_json::exception&) {
    if (pointer) *pointer = "";
    return before == now ? "" : "the checkpoint's run identity is unreadable";
  }
  const nlohmann::ordered_json patch = nlohmann::ordered_json::diff(a, b);
  if (patch.empty()) return "";
  const std::string path = patch[0].value("path", "");
  if (pointer) *pointer = path;
  if (path == "/data_sha256") return "the data rows changed (their sha256 differs)";
  if (path.rfind("/init_files_sha256", 0) == 0) {  // not a place in the spec: the run names no pointer
    if (pointer) *pointer = "";
    return "a tensor file its inits or consts load from changed (its sha256 differs; run.json's init_files lists them)";
  }
  const nlohmann::ordered_json::json_pointer p(path);
  const std::string was = a.contains(p) ? a.at(p).dump() : "absent";
  const std::string is = b.contains(p) ? b.at(p).dump() : "absent";
  return "was " + was + ", now " + is;
}

RunFolderLock::RunFolderLock(const std::string& dir) {
  const std::string path = dir + "/.gradrun.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError(path, std::string("cannot open the run folder's lock: ") + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw IoError(path, std::string("cannot lock the run folder: ") + std::strerror(err));
    // The holder writes its note just after taking the lock: wait briefly for a complete note of a
    // live process (not the previous holder's, not a half-written one).
    std::string pid, command;
    for (int tries = 0; tries < 50; ++tries) {
      std::string note;
      try {
        note = read_file(path);
      } catch (const Error&) {
      }
      const size_t nl = note.find('\n');
      if (nl != std::string::npos && nl > 0 && note.size() > nl + 1 && note.back() == '\n' &&
          note.find_first_not_of("0123456789") == nl) {
        pid = note.substr(0, nl);
        command = note.substr(nl + 1, note.size() - nl - 2);
        if (::kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno == EPERM) break;
      }
      pid.clear(), command.clear();
      ::usleep(10000);
    }
    throw InputError(dir, "",
                     "another gradrun is writing this run folder (PID " + (pid.empty() ? std::string("?") : pid) +
                         (command.empty() ? std::string("") : ": " + command) +
                         "); wait for it to end, or train into another --out");
  }
  // Who holds it: PID, then the command line (each argument shell-quoted).
  std::string command;
  try {
    const std::string raw = read_file("/proc/self/cmdline");
    for (size_t at = 0; at < raw.size();) {
      const size_t end = std::min(raw.find('\0', at), raw.size());
      command += (command.empty() ? "" : " ") + shell_quote(raw.substr(at, end - at));
      at = end + 1;
    }
  } catch (const Error&) {
  }
  const std::string text = std::to_string(::getpid()) + "\n" + command + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
    (void)n;  // the lock holds without the note
  }
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

int remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  int removed = 0;
  for (const std::string& d : {dir, dir + "/checkpoint"}) {
    std::error_code ec;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const size_t at = name.rfind(".tmp.");
      if (at == std::string::npos || at + 5 >= name.size()) continue;
      const std::string digits = name.substr(at + 5);
      if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(digits));
      if (pid == ::getpid() || !(::kill(pid, 0) != 0 && errno == ESRCH)) continue;  // its writer may still be alive
      std::error_code rec;
      if (fs::remove(it->path(), rec)) ++removed;
    }
  }
  return removed;
}

void claim_run_folder(const std::string& dir, const std::string& run_sha256, const Spec& spec, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  bool any = false;
  for (const char* f : kRunFiles) any = any || fs::exists(fs::path(dir) / f, ec);
  if (!any) return;
  bool same = false;
  std::string who = "files of an earlier gradrun run without a run.json";
  if (fs::exists(fs::path(dir) / "run.json", ec)) {
    try {
      const nlohmann::ordered_json run = nlohmann::ordered_json::parse(read_file(dir + "/run.json"));
      if (run.contains("run_sha256")) same = run["run_sha256"] == run_sha256;
      else same = run.value("spec_sha256", "") == spec.sha256;  // a run.json from before run_sha256
      // Under this process's lock no other writer is alive: a "running" is a run that was killed
      // (or whose last run.json write failed).
      std::string status = run.value("status", std::string("complete"));
      if (status == "running") status = "killed-or-unknown";
      who = "the run of " + run.value("spec", std::string("?")) + " (seed " +
            (run.contains("seed") ? run["seed"].dump() : std::string("?")) + ", status " + status + ")";
    } catch (const std::exception&) {
      who = "an unreadable run.json";
    }
  }
  if (!same && !force)
    throw InputError(dir, "",
                     "this folder holds " + who +
                         ", a different run; train into another --out, resume it with --resume, or add --force to replace it");
  for (const char* f : kRunFiles) fs::remove_all(fs::path(dir) / f, ec);
}

}  // namespace gr
