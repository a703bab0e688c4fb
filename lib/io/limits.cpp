#include "io/limits.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "io/errors.h"

namespace gr {

namespace {

// "123", "4G", "512M" → bytes; 0 when malformed.
uint64_t parse_size(const char* s) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || !(v > 0)) return 0;
  double mult = 1;
  switch (*end) {
    case 'k': case 'K': mult = 1024.0; ++end; break;
    case 'm': case 'M': mult = 1024.0 * 1024; ++end; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; ++end; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; ++end; break;
    case '\0': break;
    default: return 0;
  }
  if (*end == 'i' || *end == 'B') ++end;
  if (*end == 'B') ++end;
  if (*end != '\0' || v * mult > 1.8e19) return 0;
  return static_cast<uint64_t>(v * mult);
}

ResourceLimits read_limits() {
  ResourceLimits l;
  if (const char* v = std::getenv("GRADRUN_MAX_MEMORY"); v && parse_size(v) > 0) {
    l.memory_bytes = parse_size(v);
    l.memory_source = "GRADRUN_MAX_MEMORY";
  } else {
    double best = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
    l.memory_source = "3/4 of physical memory";
    if (!(best > 0)) best = 1e19;
    struct rlimit r {};
    if (getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY && static_cast<double>(r.rlim_cur) < best)
      best = static_cast<double>(r.rlim_cur), l.memory_source = "3/4 of ulimit -v";
    if (getrlimit(RLIMIT_DATA, &r) == 0 && r.rlim_cur != RLIM_INFINITY && static_cast<double>(r.rlim_cur) < best)
      best = static_cast<double>(r.rlim_cur), l.memory_source = "3/4 of ulimit -d";
    l.memory_bytes = static_cast<uint64_t>(best * 0.75);
  }
  if (const char* v = std::getenv("GRADRUN_MAX_CSV_COLUMNS"); v && *v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (*end == '\0' && n > 0) l.csv_columns = n;
  }
  return l;
}

}  // namespace

const ResourceLimits& resource_limits() {
  static const ResourceLimits l = read_limits();
  return l;
}

std::string human_bytes(double bytes) {
  char buf[64];
  if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (bytes >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  return buf;
}

void check_memory(double bytes, const std::string& file, const std::string& place, const std::string& what) {
  const ResourceLimits& l = resource_limits();
  if (bytes > static_cast<double>(l.memory_bytes))
    throw InputError(file, place,
                     what + " needs " + human_bytes(bytes) + ", more than the memory limit of " +
                         human_bytes(static_cast<double>(l.memory_bytes)) + " (" + l.memory_source +
                         "; set GRADRUN_MAX_MEMORY to change it)");
}

}  // namespace gr
