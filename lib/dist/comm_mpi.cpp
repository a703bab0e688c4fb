// comm_mpi.cpp — Comm over MPI_COMM_WORLD (built when CMake finds MPI: GR_HAVE_MPI).
#include <mpi.h>

#include <climits>
#include <vector>

#include "dist/comm.h"

namespace gr::dist {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CommError(std::string(what) + ": " + std::string(text, static_cast<size_t>(len)));
}

int as_int(int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX) throw CommError(std::string(what) + ": " + std::to_string(n) + " elements is more than one MPI message carries");
  return static_cast<int>(n);
}

std::vector<int> ints(std::span<const int64_t> v, const char* what) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = as_int(v[i], what);
  return out;
}

class Mpi final : public Comm {
 public:
  Mpi() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      check(MPI_Init(nullptr, nullptr), "MPI_Init");
      owns_ = true;
    }
    // Errors come back as codes (thrown as CommError) instead of MPI's default abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~Mpi() override {
    if (owns_) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string library() const override {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(text, &len);
    std::string s(text, static_cast<size_t>(len));
    if (const size_t end = s.find_first_of(std::string(",\r\n\0", 4)); end != std::string::npos) s.resize(end);  // "Open MPI v4.1.4"
    return s;
  }
  void alltoallv(const double* send, std::span<const int64_t> scount, std::span<const int64_t> sdispl, double* recv,
                 std::span<const int64_t> rcount, std::span<const int64_t> rdispl) override {
    const auto sc = ints(scount, "alltoallv"), sd = ints(sdispl, "alltoallv"), rc = ints(rcount, "alltoallv"),
               rd = ints(rdispl, "alltoallv");
    check(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_DOUBLE, recv, rc.data(), rd.data(), MPI_DOUBLE, MPI_COMM_WORLD),
          "MPI_Alltoallv");
  }
  void allgatherv(const double* send, int64_t count, double* recv, std::span<const int64_t> counts,
                  std::span<const int64_t> displs) override {
    const auto c = ints(counts, "allgatherv"), d = ints(displs, "allgatherv");
    check(MPI_Allgatherv(send, as_int(count, "allgatherv"), MPI_DOUBLE, recv, c.data(), d.data(), MPI_DOUBLE, MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }
  void gatherv0(const double* send, int64_t count, double* recv, std::span<const int64_t> counts,
                std::span<const int64_t> displs) override {
    const auto c = ints(counts, "gatherv"), d = ints(displs, "gatherv");
    check(MPI_Gatherv(send, as_int(count, "gatherv"), MPI_DOUBLE, recv, c.data(), d.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD),
          "MPI_Gatherv");
  }
  void send(int to, const double* data, int64_t n) override {
    check(MPI_Send(data, as_int(n, "send"), MPI_DOUBLE, to, 0, MPI_COMM_WORLD), "MPI_Send");
  }
  void recv(int from, double* data, int64_t n) override {
    check(MPI_Recv(data, as_int(n, "recv"), MPI_DOUBLE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  }
  void broadcast(double* data, int64_t n, int root) override {
    check(MPI_Bcast(data, as_int(n, "broadcast"), MPI_DOUBLE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  std::vector<std::string> allgather_text(const std::string& mine) override {
    int len = as_int(static_cast<int64_t>(mine.size()), "allgather_text");
    std::vector<int> lens(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
    int total = 0;
    for (int q = 0; q < size_; ++q) displs[static_cast<size_t>(q)] = total, total += lens[static_cast<size_t>(q)];
    std::string all(static_cast<size_t>(total), '\0');
    check(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, MPI_COMM_WORLD),
          "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int q = 0; q < size_; ++q)
      out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(q)]), static_cast<size_t>(lens[static_cast<size_t>(q)])));
    return out;
  }
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  int rank_ = 0, size_ = 1;
  bool owns_ = false;
};

}  // namespace

bool built_with_mpi() { return true; }
std::unique_ptr<Comm> world() { return std::make_unique<Mpi>(); }

}  // namespace gr::dist
