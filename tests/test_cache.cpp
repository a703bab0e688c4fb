// test_cache.cpp — the module cache nobody else can plant (lib/device/cache.cpp, docs/security.md):
// private folders, refused foreign or writable entries, sealed modules that are rebuilt when altered.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "device/backend.h"
#include "device/detail.h"
#include "support/skip.h"
#include "train/host_build.h"

using namespace gr;
using namespace gr::device;
namespace fs = std::filesystem;

namespace {

// A kernel module with one kernel; `tag` makes its text (and so its cache key) unique per test.
std::string module_source(const std::string& tag) {
  return "// " + tag + R"(
extern "C" __global__ void c_twice(double* out, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = 2.0 * (double)i;
}
GR_EXPORT_KERNEL(c_twice)
)";
}

// Compiles and runs the module on a fresh host backend over `cache`; returns out[3] (6.0 when right).
double run_module(const std::string& cache, const std::string& tag) {
  HostOptions o;
  o.cache_dir = cache;
  o.threads = 1;
  auto be = make_host_backend(o);
  Module* m = be->compile(module_source(tag), "test_cache.cu");
  Buffer out = be->alloc(8 * sizeof(double));
  long long n = 8;
  void* args[] = {&out.handle, &n};
  be->launch(be->kernel(m, "c_twice"), 1, 1, args);
  be->synchronize();
  std::vector<double> got(8);
  be->download(got.data(), out, 8 * sizeof(double));
  be->free(out);
  return got[3];
}

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

fs::path only_module(const fs::path& host_dir) {
  fs::path found;
  for (const auto& e : fs::directory_iterator(host_dir))
    if (e.path().extension() == ".so") found = e.path();
  REQUIRE(!found.empty());
  return found;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const gr::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("cache: folders are made 0700 and every module carries a seal that matches", "[cache]") {
  TempDir t("gr_test_cache_");
  const std::string cache = (t.path() / "a" / "b").string();
  CHECK(run_module(cache, "sealed") == 6.0);
  CHECK(mode_of(t.path() / "a") == 0700);
  CHECK(mode_of(cache) == 0700);
  CHECK(mode_of(fs::path(cache) / "host") == 0700);
  const fs::path so = only_module(fs::path(cache) / "host");
  std::string why;
  CHECK(detail::read_sealed_module(so.string(), &why).has_value());
  INFO(why);
  // The seal is the SHA-256 of what precedes it.
  std::string bytes = detail::read_file(so.string());
  REQUIRE(bytes.size() > 81);
  CHECK(bytes.compare(bytes.size() - 81, 16, "\nGRADRUN-SHA256:") == 0);
}

TEST_CASE("cache: an altered or unsealed module is rebuilt, never loaded", "[cache]") {
  TempDir t("gr_test_cache_");
  const std::string cache = t.path().string();
  CHECK(run_module(cache, "altered") == 6.0);
  const fs::path so = only_module(fs::path(cache) / "host");
  // Flip one byte in the middle of the image: the seal no longer matches.
  std::string bytes = detail::read_file(so.string());
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
  std::ofstream(so, std::ios::binary | std::ios::trunc) << bytes;
  std::string why;
  CHECK_FALSE(detail::read_sealed_module(so.string(), &why).has_value());
  CHECK_THAT(why, Catch::Contains("does not match its seal"));
  const unsigned long before = host_compiler_runs();
  CHECK(run_module(cache, "altered") == 6.0);
  CHECK(host_compiler_runs() == before + 1);  // rebuilt
  CHECK(detail::read_sealed_module(so.string()).has_value());
  // A module without a seal (another program's, or an old gradrun's) is rebuilt too.
  bytes = detail::read_file(so.string());
  std::ofstream(so, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 81);
  CHECK(run_module(cache, "altered") == 6.0);
  CHECK(host_compiler_runs() == before + 2);
}

TEST_CASE("cache: a planted module or a folder others can write is refused with one line", "[cache]") {
  TempDir t("gr_test_cache_");
  const std::string cache = t.path().string();
  CHECK(run_module(cache, "planted") == 6.0);
  const fs::path host = fs::path(cache) / "host";
  const fs::path so = only_module(host);

  SECTION("a folder writable by others") {
    fs::permissions(host, fs::perms::others_write, fs::perm_options::add);
    const std::string e = error_of([&] { run_module(cache, "planted"); });
    CHECK_THAT(e, Catch::Contains(host.string()) && Catch::Contains("is writable by others") && Catch::Contains("refusing"));
    CHECK(e.find('\n') == std::string::npos);
  }
  SECTION("the cache root writable by its group (the host folder could be swapped)") {
    fs::permissions(cache, fs::perms::group_write, fs::perm_options::add);
    CHECK_THAT(error_of([&] { run_module(cache, "planted"); }), Catch::Contains("is writable by its group"));
  }
  SECTION("a module writable by others") {
    fs::permissions(so, fs::perms::others_write, fs::perm_options::add);
    CHECK_THAT(error_of([&] { run_module(cache, "planted"); }), Catch::Contains(so.string()) && Catch::Contains("writable by others"));
  }
  SECTION("a module that is a link to a file elsewhere") {
    const fs::path elsewhere = t.path() / "elsewhere.so";
    fs::rename(so, elsewhere);
    fs::create_symlink(elsewhere, so);
    CHECK_THAT(error_of([&] { run_module(cache, "planted"); }), Catch::Contains("is a symbolic link"));
  }
  SECTION("entries owned by another user (the check, for any uid)") {
    const unsigned other = geteuid() + 1;
    CHECK_THAT(detail::cache_entry_problem(so.string(), false, other), Catch::Contains("is owned by uid"));
    CHECK_THAT(detail::cache_entry_problem(host.string(), true, other), Catch::Contains("is owned by uid"));
    CHECK(detail::cache_entry_problem(so.string(), false, geteuid()).empty());
  }
}

TEST_CASE("cache: a module owned by another user is refused", "[cache]") {
  if (geteuid() != 0) GR_SKIP("root", "chown to another user needs root; the uid check itself runs in [cache] above");
  TempDir t("gr_test_cache_");
  const std::string cache = t.path().string();
  CHECK(run_module(cache, "chown") == 6.0);
  const fs::path so = only_module(fs::path(cache) / "host");
  REQUIRE(chown(so.c_str(), 65534, 65534) == 0);
  CHECK_THAT(error_of([&] { run_module(cache, "chown"); }), Catch::Contains("is owned by uid 65534"));
}

TEST_CASE("cache: the /tmp fallback is made private or refused", "[cache]") {
  TempDir t("gr_test_cache_");
  const std::string fresh = (t.path() / "gradrun-cache").string();
  CHECK(detail::private_tmp_dir(fresh) == fresh);
  CHECK(mode_of(fresh) == 0700);
  CHECK(detail::private_tmp_dir(fresh) == fresh);  // ours and private: used again

  const std::string loose = (t.path() / "loose").string();
  fs::create_directory(loose);
  fs::permissions(loose, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  CHECK_THAT(error_of([&] { detail::private_tmp_dir(loose); }), Catch::Contains("is not private") && Catch::Contains("GRADRUN_CACHE"));

  const std::string link = (t.path() / "link").string();
  fs::create_directory_symlink(fresh, link);
  CHECK_THAT(error_of([&] { detail::private_tmp_dir(link); }), Catch::Contains("is a symbolic link"));

  const std::string planted = (t.path() / "planted").string();
  fs::create_directory(planted);
  CHECK_THAT(detail::cache_entry_problem(planted, true, geteuid() + 1), Catch::Contains("is owned by uid"));

  // With no GRADRUN_CACHE, XDG_CACHE_HOME or HOME the fallback is /tmp/gradrun-cache-<euid>, private.
  const char* keep[] = {"GRADRUN_CACHE", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* k : keep)
    if (const char* v = std::getenv(k)) saved.emplace_back(k, v);
  for (const char* k : keep) unsetenv(k);
  std::string got, err;
  try {
    got = detail::resolve_cache_dir("");
  } catch (const gr::Error& e) {
    err = e.what();
  }
  for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
  if (err.empty()) {
    CHECK(got == "/tmp/gradrun-cache-" + std::to_string(geteuid()));
    CHECK(mode_of(got) == 0700);
  } else {
    CHECK_THAT(err, Catch::Contains("refusing"));  // someone made it first: refused, not used
  }
}
