#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/errors.h"
#include "io/limits.h"

namespace gr {

namespace {

// GRADRUN_NO_FSYNC=1 skips the fsync calls (tests, scratch runs): the files stay whole, but a power
// loss may then leave a renamed file empty.
bool fsync_wanted() {
  static const bool wanted = [] {
    const char* e = std::getenv("GRADRUN_NO_FSYNC");
    return !(e && std::strcmp(e, "1") == 0);
  }();
  return wanted;
}

// Writes all of `bytes` to fd (retrying short writes and EINTR); errno of the failure, else 0.
int write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// The folder's entry for a renamed file on disk too (a rename is durable only once its folder is).
void sync_folder_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(path, std::string("cannot open its folder to sync it: ") + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP)  // some file systems cannot sync a folder
    throw IoError(path, std::string("cannot sync its folder: ") + std::strerror(err));
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(path, std::string("cannot write: ") + std::strerror(errno));
  if (const int err = write_all(fd, bytes); err != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw IoError(path, std::string("cannot write: ") + std::strerror(err));
  }
  if (fsync_wanted() && ::fsync(fd) != 0) {  // the bytes on disk before the name points at them
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw IoError(path, std::string("cannot write (fsync): ") + std::strerror(err));
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(path, std::string("cannot write: ") + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(path, std::string("cannot rename into place: ") + std::strerror(err));
  }
  if (fsync_wanted()) sync_folder_of(path);
}

void overwrite_file_in_place(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) throw IoError(path, std::string("cannot write: ") + std::strerror(errno));
  if (const int err = write_all(fd, bytes); err != 0) {
    ::close(fd);
    throw IoError(path, std::string("cannot write: ") + std::strerror(err));
  }
  const bool synced = !fsync_wanted() || ::fsync(fd) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !synced) throw IoError(path, std::string("cannot write: ") + std::strerror(synced ? errno : err));
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw IoError(path, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path, std::string("cannot open: ") + std::strerror(errno));
  if (const auto size = std::filesystem::file_size(path, ec); !ec)
    check_memory(static_cast<double>(size), path, "", "reading the file whole");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(path, "read failed");
  return ss.str();
}

}  // namespace gr
