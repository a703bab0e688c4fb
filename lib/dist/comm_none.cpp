// comm_none.cpp — a build without MPI: world() says so (docs/distributed.md, building with MPI).
#include "dist/comm.h"

namespace gr::dist {

bool built_with_mpi() { return false; }
std::unique_ptr<Comm> world() {
  throw CommError("this gradrun was built without MPI; install Open MPI (libopenmpi-dev) and rebuild (scripts/setup --minimal --mpi)");
}

}  // namespace gr::dist
