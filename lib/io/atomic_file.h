// atomic_file.h — write a whole file under a temporary name in the same folder, then rename it
// into place, so a reader (or a crash) never sees a torn file.
#pragma once
#include <string>
#include <string_view>

namespace gr {

// Throws IoError naming the path when the folder is not writable, the disk is full, etc.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Reads a whole file; throws IoError when it cannot be opened or read.
std::string read_file(const std::string& path);

}  // namespace gr
