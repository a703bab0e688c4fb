// comm.h — the process group of a data-parallel run (docs/distributed.md): rank r of R.
//
// Only collectives whose result does not depend on an order MPI leaves open: values are moved
// (all-to-all, all-gather, gather, broadcast, point to point), never reduced by MPI. Every sum of
// values happens in our code, in an order fixed by the shards, not by R.
//
// One process is solo(): rank 0 of 1, every call a copy. Under `mpirun`, world() is MPI_COMM_WORLD
// (when gradrun was built with MPI). A library error inside a collective throws dist::CommError;
// a rank that fails calls abort(), which ends every rank of the job (no rank waits forever).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace gr::dist {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "Open MPI v4.1.4, ..." (MPI_Get_library_version, first line) or "none (one process)".
  virtual std::string library() const = 0;

  // Rank r sends send[sdispl[q] .. + scount[q]) to rank q and receives rank q's part into
  // recv[rdispl[q] ..); counts in elements (MPI_Alltoallv).
  virtual void alltoallv(const double* send, std::span<const int64_t> scount, std::span<const int64_t> sdispl, double* recv,
                         std::span<const int64_t> rcount, std::span<const int64_t> rdispl) = 0;
  // Every rank's `count` elements, rank q's at recv + displ[q] (MPI_Allgatherv).
  virtual void allgatherv(const double* send, int64_t count, double* recv, std::span<const int64_t> counts,
                          std::span<const int64_t> displs) = 0;
  // Rank q's `count` elements at recv + displ[q] on rank 0 only (MPI_Gatherv; recv unused elsewhere).
  virtual void gatherv0(const double* send, int64_t count, double* recv, std::span<const int64_t> counts,
                        std::span<const int64_t> displs) = 0;
  virtual void send(int to, const double* data, int64_t n) = 0;
  virtual void recv(int from, double* data, int64_t n) = 0;
  virtual void broadcast(double* data, int64_t n, int root) = 0;
  // Every rank's string (the same length on every rank is not required).
  virtual std::vector<std::string> allgather_text(const std::string& mine) = 0;
  // Ends the whole job with `code` (MPI_Abort); solo: std::exit is the caller's business, so it
  // returns and the caller exits normally.
  virtual void abort(int code) = 0;
};

std::unique_ptr<Comm> solo();

// The launcher's process count when this process was started by mpirun/mpiexec (Open MPI's
// OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK), 0 when it was not.
int launched_size();
// True when this build has MPI (CMake found it; GR_HAVE_MPI).
bool built_with_mpi();
// MPI_COMM_WORLD, MPI_Init'ed on first use (MPI_Finalize at exit). Throws CommError in a build
// without MPI.
std::unique_ptr<Comm> world();

}  // namespace gr::dist
