// common.cpp — what both backends share: backend selection, the module text, the cache (key
// hashing, atomic files), and running the host compiler.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "device/detail.h"
#include "tensor/diag.h"

extern char** environ;

namespace gr::device {

Backend::~Backend() = default;

unsigned fit_block(Backend& backend, Kernel* kernel, unsigned wanted) {
  const unsigned limit = backend.max_block(kernel);
  if (wanted <= limit) return wanted;
  static std::mutex mu;
  static std::set<std::string> told;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    first = told.insert(backend.name() + "/" + kernel->name).second;
  }
  if (first)
    diag::warn(backend.name() + " backend: kernel " + kernel->name + " can launch at most " + std::to_string(limit) +
               " threads per block here" +
               (kernel->registers >= 0 ? " (" + std::to_string(kernel->registers) + " registers per thread)" : std::string()) +
               "; its launches use " + std::to_string(limit) + " instead of " + std::to_string(wanted) +
               " (the same bits: kernels are correct for any block size)");
  return limit;
}

Selection select_backend(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Host: {
      Selection s{make_host_backend(), ""};
      s.why = "host backend requested (" + s.backend->describe() + ")";
      return s;
    }
    case DeviceKind::Cuda: {
      Selection s{make_cuda_backend(), ""};  // DeviceUnavailable propagates: the user asked for CUDA
      s.why = "cuda backend requested (" + s.backend->describe() + ")";
      return s;
    }
    case DeviceKind::Auto:
      try {
        Selection s{make_cuda_backend(), ""};
        s.why = "auto: CUDA is usable (" + s.backend->describe() + ")";
        return s;
      } catch (const DeviceUnavailable& e) {
        std::string reason = e.what();
        const std::string prefix = "unavailable: ";
        if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
        return Selection{nullptr, "no usable CUDA device: " + reason};
      }
    case DeviceKind::Cpu: break;
  }
  throw gr::Error("device kind cpu has no device backend (it is the CPU tape; expected host, cuda or auto)");
}

std::string default_cache_dir() { return detail::resolve_cache_dir(""); }

namespace {

class NullBackend final : public Backend {
 public:
  std::string name() const override { return "null"; }
  Capabilities capabilities() const override { return Capabilities{true, 128}; }
  std::string describe() const override { return "null: compiles and runs nothing (planning only)"; }
  Module* compile(const std::string&, const std::string& name) override {
    auto m = std::make_unique<Module>();
    m->owner = this;
    m->name = name;
    modules_.push_back(std::move(m));
    return modules_.back().get();
  }
  Kernel* kernel(Module* module, const std::string& name) override {
    if (!module || module->owner != this) throw gr::Error("null backend: kernel(): the module belongs to another backend");
    auto k = std::make_unique<Kernel>();
    k->owner = this;
    k->module = module;
    k->name = name;
    kernels_.push_back(std::move(k));
    return kernels_.back().get();
  }
  Buffer alloc(size_t bytes) override {
    if (bytes == 0) throw gr::Error("null backend: alloc of 0 bytes");
    next_ += (bytes + 255) / 256 * 256 + 256;
    return Buffer{next_, bytes};
  }
  void free(Buffer) override {}
  void upload(Buffer, const void*, size_t, size_t) override {}
  void download(void* dst, Buffer, size_t bytes, size_t) override { std::memset(dst, 0, bytes); }
  void launch(Kernel*, unsigned, unsigned, void**) override {}
  unsigned max_block(Kernel*) const override { return 1024; }
  void synchronize() override {}
  void begin_capture() override {}
  void end_capture() override { id_ = ++captures_; }
  void replay() override {}
  bool has_capture() const override { return id_ != 0; }
  uint64_t capture_id() const override { return id_; }
  void abort_capture() noexcept override {}
  void clear_capture() noexcept override { id_ = 0; }

 private:
  std::vector<std::unique_ptr<Module>> modules_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  uint64_t next_ = 1u << 20, captures_ = 0, id_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_null_backend() { return std::make_unique<NullBackend>(); }

namespace detail {

std::string module_text(const std::string& source, const std::string& name) {
  // #line makes compiler diagnostics point at the caller's module and its own line numbers.
  std::string quoted;
  for (char c : name) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += (c == '\n' ? ' ' : c);
  }
  return "#include \"host_shim.h\"\n#line 1 \"" + quoted + "\"\n" + source + "\n";
}

const std::string& embedded_headers_digest() {
  static const std::string digest = [] {
    Sha256 h;
    for (const EmbeddedHeader& e : embedded_headers()) h.update(hash_parts({e.name, e.text}));
    return h.hex();
  }();
  return digest;
}

std::string hash_parts(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += std::to_string(p.size()) + ":" + std::string(p) + ";";
  return out;
}

// ---- cache files -----------------------------------------------------------------------------

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw gr::Error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_name(const std::string& final_path) {
  static std::atomic<unsigned long> counter{0};
  return final_path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
}

void write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = temp_name(path);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out.flush()) {
      std::remove(tmp.c_str());
      throw gr::Error("cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw gr::Error("cannot rename " + tmp + " to " + path + ": " + why);
  }
}

// ---- processes -------------------------------------------------------------------------------

int run_process(const std::vector<std::string>& argv, std::string* output, std::string* start_error) {
  // posix_spawn (no shell, so paths need no quoting), stdout and stderr into one pipe.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    if (start_error) *start_error = std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    if (output) *output = std::string("cannot start ") + argv[0] + ": " + std::strerror(rc);
    if (start_error) *start_error = std::strerror(rc);
    return -1;
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) text.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (output) *output = std::move(text);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string first_lines(const std::string& text, int max_lines) {
  size_t pos = 0;
  for (int i = 0; i < max_lines && pos < text.size(); ++i) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) return text;
    pos = nl + 1;
  }
  return pos < text.size() ? text.substr(0, pos) + "[...]\n" : text;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  return true;
}

}  // namespace detail
}  // namespace gr::device
