// atomic_file.h — write a whole file under a temporary name in the same folder, then rename it
// into place, so a reader (or a crash) never sees a torn file.
#pragma once
#include <string>
#include <string_view>

namespace gr {

// The file is fsync'ed before the rename and its folder after, so a power loss leaves the old file
// or the new one, whole (GRADRUN_NO_FSYNC=1 in the environment skips both: tests, scratch runs).
// The temporary name is PATH.tmp.PID (a killed writer's are removed by the next train into the
// folder, train/run_state.h). Throws IoError naming the path when the folder is not writable, the
// disk is full, etc.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The last resort of a failing run (disk full): truncates `path` and writes `bytes` into it in
// place, then fsyncs, needing no more room than the file had (rounded up to a block). Not atomic: a
// crash inside it can leave the file torn. Throws IoError.
void overwrite_file_in_place(const std::string& path, std::string_view bytes);

// Reads a whole file; throws IoError when it cannot be opened or read.
std::string read_file(const std::string& path);

}  // namespace gr
