// run_state.h — a run's lifecycle around the training loop: the interrupt flag set by SIGINT and
// SIGTERM, the run's identity (what a resume must keep: everything that changes the finished
// steps' math) and the run folder's ownership (one run per folder).
#pragma once
#include <string>

#include "io/errors.h"
#include "train/model.h"

namespace gr {

// While alive, the first SIGINT/SIGTERM only sets a flag (the loop finishes its step, writes a
// checkpoint and the logs, and stops); a second one is noted on stderr and otherwise ignored, so the
// checkpoint reaches the disk; a third restores the default action and re-raises, so the process
// ends at once (every file is written under a temporary name and renamed, so only complete files
// remain). The previous handlers come back on destruction.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  static bool requested();
};

// Training stopped on SIGINT/SIGTERM after writing a checkpoint and the logs: exit 130.
class InterruptedError : public Error {
 public:
  using Error::Error;
};

// The canonical JSON (sorted keys, no whitespace) of what a resumed run must share with the run
// that wrote the checkpoint: the spec without train.epochs, train.diverge_factor, name, output,
// device and metrics, data file names replaced by "file"; the resolved seed, optimizer and
// batching; the sha256 of the data rows (train and validation, as loaded).
std::string run_identity(const Model& model);
// The first field that differs between two identities, as "<JSON pointer>: was X, now Y" pieces;
// empty when equal. `pointer` receives the JSON pointer (into the spec where there is one).
std::string identity_difference(const std::string& before, const std::string& now, std::string* pointer);

// One writer per run folder: an exclusive flock() on DIR/.gradrun.lock, taken before the folder is
// checked or written and held while this object lives (the kernel releases it when the process
// ends, however it ends). The file holds the holder's PID and command line. A folder another
// process holds: InputError (exit 2) naming that PID and command, at once (no waiting).
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::string& dir);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes the temporary files (NAME.tmp.PID, io/atomic_file.h) that processes no longer alive left
// in `dir` and dir/checkpoint (a kill between a write and its rename); returns how many.
int remove_stale_temporaries(const std::string& dir);

// Makes `dir` this run's folder. A folder whose run.json belongs to another run (another identity,
// or gradrun files without a run.json) is refused (InputError, exit 2) unless `force`; the old
// run's files are then removed, as they are when the folder held an earlier try of this same run.
void claim_run_folder(const std::string& dir, const std::string& run_sha256, const Spec& spec, bool force);

}  // namespace gr
