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
#include <sstream>

#include "device/detail.h"

extern char** environ;

namespace gr::device {

Backend::~Backend() = default;

Selection select_backend(const std::string& kind) {
  if (kind == "host") {
    Selection s{make_host_backend(), ""};
    s.why = "host backend requested (" + s.backend->describe() + ")";
    return s;
  }
  if (kind == "cuda") {
    Selection s{make_cuda_backend(), ""};  // DeviceUnavailable propagates: the user asked for CUDA
    s.why = "cuda backend requested (" + s.backend->describe() + ")";
    return s;
  }
  if (kind == "auto") {
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
  }
  throw gr::Error("unknown device backend '" + kind + "' (expected host, cuda or auto)");
}

std::string default_cache_dir() { return detail::resolve_cache_dir(""); }

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

// ---- SHA-256 ---------------------------------------------------------------------------------
namespace {
constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const unsigned char* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] + w[i];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
}

void Sha256::update(std::string_view s) {
  total_ += s.size();
  for (unsigned char c : s) {
    buf_[used_++] = c;
    if (used_ == 64) block(buf_), used_ = 0;
  }
}

std::string Sha256::hex() {
  const uint64_t bits = total_ * 8;
  buf_[used_++] = 0x80;
  if (used_ > 56) {
    while (used_ < 64) buf_[used_++] = 0;
    block(buf_), used_ = 0;
  }
  while (used_ < 56) buf_[used_++] = 0;
  for (int i = 7; i >= 0; --i) buf_[used_++] = static_cast<unsigned char>(bits >> (8 * i));
  block(buf_), used_ = 0;
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int i = 28; i >= 0; i -= 4) out += digits[(v >> i) & 15];
  return out;
}

std::string hash_parts(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += std::to_string(p.size()) + ":" + std::string(p) + ";";
  return out;
}

// ---- cache files -----------------------------------------------------------------------------

std::string resolve_cache_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* v = std::getenv("GRADRUN_CACHE"); v && *v) return v;
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v) return std::string(v) + "/gradrun";
  if (const char* v = std::getenv("HOME"); v && *v) return std::string(v) + "/.cache/gradrun";
  return "/tmp/gradrun-cache-" + std::to_string(getuid());
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw gr::Error("cannot create cache directory " + path + ": " + ec.message());
}

bool file_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

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

int run_process(const std::vector<std::string>& argv, std::string* output) {
  // posix_spawn (no shell, so paths need no quoting), stdout and stderr into one pipe.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
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
