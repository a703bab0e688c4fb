// cache.cpp — the module cache on disk, which nobody else can plant (docs/security.md).
//
// Compiled kernel modules are loaded from the cache and run in this process (dlopen on the host,
// cuModuleLoadData on CUDA), so a file another user could write there is code they run as us.
// Hence:
//   • folders are created 0700; every cache folder used (and its parent, so the folder cannot be
//     renamed away and replaced) must be owned by us and not writable by group or others;
//   • the fallback with no $GRADRUN_CACHE, $XDG_CACHE_HOME or $HOME, /tmp/gradrun-cache-<uid>, is
//     made with mkdir(0700) — atomic, so whoever creates it owns it — and refused when it already
//     exists as anything but our own private folder;
//   • before a cached file is read or loaded, it must be a regular file (not a link) owned by us and
//     not writable by group or others;
//   • each module carries a seal: a trailer holding the SHA-256 of the bytes before it, checked
//     before use (a truncated or altered module is rebuilt, never loaded).
// A refusal throws gr::Error with one line that names the path and what is wrong with it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <string>

#include "device/detail.h"
#include "device/host_compile.h"
#include "device/nvrtc.h"

namespace gr::device::detail {

namespace {

constexpr std::string_view kSealTag = "\nGRADRUN-SHA256:";
constexpr size_t kSealSize = kSealTag.size() + 64 + 1;  // tag, hex digest, '\n'

std::string parent_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string mode_text(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// The problem with a stat'ed cache entry, or "".
std::string stat_problem(const struct stat& st, bool want_dir, unsigned expected_uid) {
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return want_dir ? "is not a folder" : "is not a regular file";
  if (st.st_uid != expected_uid)
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " + std::to_string(expected_uid) + ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return "is writable by " + std::string(st.st_mode & S_IWOTH ? "others" : "its group") + " (mode " + mode_text(st.st_mode) + ")";
  return "";
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw gr::Error("module cache " + path + " " + why +
                  ": refusing to use it (another user could plant code there; see docs/security.md)");
}

}  // namespace

std::string cache_entry_problem(const std::string& path, bool want_dir, unsigned expected_uid) {
  struct stat st {};
  // lstat for files (a link could point anywhere); stat for folders, whose owner is what matters.
  if ((want_dir ? stat(path.c_str(), &st) : lstat(path.c_str(), &st)) != 0) return std::string("cannot be examined: ") + std::strerror(errno);
  if (!want_dir && S_ISLNK(st.st_mode)) return "is a symbolic link";
  return stat_problem(st, want_dir, expected_uid);
}

void check_cache_dir(const std::string& path) {
  if (const std::string why = cache_entry_problem(path, true, geteuid()); !why.empty()) refuse(path, why);
}

void check_cache_file(const std::string& path) {
  if (const std::string why = cache_entry_problem(path, false, geteuid()); !why.empty()) refuse(path, why);
}

std::string private_tmp_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0) return path;
  if (errno != EEXIST) throw gr::Error("cannot create module cache " + path + ": " + std::strerror(errno));
  // It exists: someone made it first. Only our own private folder (not a link to one) will do.
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) throw gr::Error("cannot examine module cache " + path + ": " + std::strerror(errno));
  std::string why = S_ISLNK(st.st_mode) ? "is a symbolic link" : stat_problem(st, true, geteuid());
  if (why.empty() && (st.st_mode & 077)) why = "is not private (mode " + mode_text(st.st_mode) + ", want 0700)";
  if (!why.empty()) refuse(path, why + "; set GRADRUN_CACHE to a folder of your own");
  return path;
}

std::string resolve_cache_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* v = std::getenv("GRADRUN_CACHE"); v && *v) return v;
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v) return std::string(v) + "/gradrun";
  if (const char* v = std::getenv("HOME"); v && *v) return std::string(v) + "/.cache/gradrun";
  return private_tmp_dir("/tmp/gradrun-cache-" + std::to_string(geteuid()));
}

void make_dirs(const std::string& path) {
  // Missing folders are made one by one with mode 0700 (create_directories would use 0777 & ~umask).
  std::string partial;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t slash = path.find('/', pos);
    partial = path.substr(0, slash == std::string::npos ? path.size() : slash);
    pos = slash == std::string::npos ? path.size() + 1 : slash + 1;
    if (partial.empty() || partial == "." || partial == "..") continue;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST)
      throw gr::Error("cannot create cache directory " + partial + ": " + std::strerror(errno));
  }
  check_cache_dir(path);
  check_cache_dir(parent_of(path));
}

bool file_exists(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return false;
  check_cache_file(path);  // whoever asks is about to use it or to build next to it
  return true;
}

std::string seal_module(std::string bytes) {
  Sha256 h;
  h.update(bytes);
  bytes += kSealTag;
  bytes += h.hex();
  bytes += '\n';
  return bytes;
}

void seal_module_file(const std::string& path) {
  write_file_atomic(path, seal_module(read_file(path)));
}

std::optional<std::string> read_sealed_module(const std::string& path, std::string* why) {
  // O_NOFOLLOW + fstat: the checks and the read are about the same file.
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (why) *why = path + ": " + std::strerror(errno);
    if (errno == ELOOP) refuse(path, "is a symbolic link");
    return std::nullopt;
  }
  struct stat st {};
  std::string bytes;
  if (fstat(fd, &st) == 0) {
    if (const std::string p = stat_problem(st, false, geteuid()); !p.empty()) {
      close(fd);
      refuse(path, p);
    }
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = read(fd, bytes.data() + got, bytes.size() - got);
      if (n <= 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    bytes.resize(got);
  }
  close(fd);
  auto mismatch = [&](const std::string& w) -> std::optional<std::string> {
    if (why) *why = path + ": " + w;
    return std::nullopt;
  };
  if (bytes.size() < kSealSize || bytes.compare(bytes.size() - kSealSize, kSealTag.size(), kSealTag) != 0)
    return mismatch("no gradrun seal (damaged, or written by another program)");
  const std::string payload = bytes.substr(0, bytes.size() - kSealSize);
  Sha256 h;
  h.update(payload);
  if (bytes.compare(bytes.size() - 65, 64, h.hex()) != 0) return mismatch("its SHA-256 does not match its seal (damaged or altered)");
  return payload;
}

std::string build_once(const std::string& key, const std::function<std::string()>& make, bool* waited) {
  static std::mutex mu;
  static std::map<std::string, std::shared_future<std::string>> in_flight;
  std::promise<std::string> mine;
  std::shared_future<std::string> theirs;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = in_flight.find(key); it != in_flight.end()) theirs = it->second;
    else in_flight.emplace(key, mine.get_future().share());
  }
  if (waited) *waited = theirs.valid();
  if (theirs.valid()) return theirs.get();  // rethrows the builder's exception
  auto forget = [&] {
    std::lock_guard<std::mutex> lock(mu);
    in_flight.erase(key);
  };
  std::string out;
  try {
    out = make();
  } catch (...) {
    mine.set_exception(std::current_exception());
    forget();
    throw;
  }
  mine.set_value(out);
  forget();
  return out;
}

std::string cuda_module_image(const std::string& root, const std::string& path, const std::string& text,
                              const std::string& name, const std::string& target, bool rebuild, bool* compiled) {
  bool fresh = false;
  std::string image = build_once(path, [&]() -> std::string {
    // Inside the in-flight slot: a caller that missed the cache just before another finished
    // writing it finds the file here and compiles nothing.
    if (!rebuild && file_exists(path)) {
      std::string why;
      if (std::optional<std::string> cached = read_sealed_module(path, &why)) return *cached;
      // Unsealed or altered: rebuilt below, never loaded.
    }
    std::string built = nvrtc_compile(text, name, target, nullptr);
    make_dirs(root);
    write_file_atomic(path, seal_module(built));
    fresh = true;
    return built;
  });
  if (compiled) *compiled = fresh;
  return image;
}

void* open_cached_module(const std::string& so, std::string* why) {
  if (!read_sealed_module(so, why)) return nullptr;
  // The folder is ours and private (make_dirs checked it), so nobody else can swap the file
  // between this check and dlopen. The seal trailer after the ELF image is ignored by the loader.
  return load_shared_object(so, why);
}

}  // namespace gr::device::detail
