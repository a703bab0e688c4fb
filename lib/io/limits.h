// limits.h — how much one spec or data file may ask of the machine (docs/security.md).
//
// A spec can arrive in somebody's pull request; a parameter of shape [1e5, 1e5], an npz member that
// claims 10 GB, or a CSV with a million columns must be refused with one located line (exit 2)
// before anything that size is allocated — not end in an out-of-memory kill or a bad_alloc deep in
// training. The limits:
//   memory budget  the bytes one input may make gradrun allocate (a file read whole, a decompressed
//                  npz member, a parameter with its gradient and optimizer state, a CSV table):
//                  $GRADRUN_MAX_MEMORY when set (bytes, or with a K/M/G/T suffix), else 3/4 of the
//                  smallest of physical memory, RLIMIT_AS (ulimit -v) and RLIMIT_DATA;
//   CSV columns    $GRADRUN_MAX_CSV_COLUMNS when set, else 65536.
// A malformed variable is ignored in favour of the default (and named in the messages' source).
#pragma once
#include <cstdint>
#include <string>

namespace gr {

struct ResourceLimits {
  uint64_t memory_bytes = 0;
  std::string memory_source;  // e.g. "GRADRUN_MAX_MEMORY", "ulimit -v", "physical memory"
  int64_t csv_columns = 65536;
};

// Read once from the environment and the process limits.
const ResourceLimits& resource_limits();

// Throws InputError(file, place, what + ": needs N bytes, more than the memory limit ...") when
// `bytes` exceeds the memory budget.
void check_memory(double bytes, const std::string& file, const std::string& place, const std::string& what);

// "3.0 GiB"
std::string human_bytes(double bytes);

}  // namespace gr
