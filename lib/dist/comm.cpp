#include "dist/comm.h"

#include <cstdlib>
#include <cstring>

namespace gr::dist {

namespace {

// One process: every collective is a copy from its own send buffer.
class Solo final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string library() const override { return "none (one process)"; }
  void alltoallv(const double* send, std::span<const int64_t> scount, std::span<const int64_t> sdispl, double* recv,
                 std::span<const int64_t>, std::span<const int64_t> rdispl) override {
    copy(send + sdispl[0], scount[0], recv + rdispl[0]);
  }
  void allgatherv(const double* send, int64_t count, double* recv, std::span<const int64_t>, std::span<const int64_t> displs) override {
    copy(send, count, recv + displs[0]);
  }
  void gatherv0(const double* send, int64_t count, double* recv, std::span<const int64_t>, std::span<const int64_t> displs) override {
    copy(send, count, recv + displs[0]);
  }
  void send(int, const double*, int64_t) override { throw CommError("send: a solo run has no other rank"); }
  void recv(int, double*, int64_t) override { throw CommError("recv: a solo run has no other rank"); }
  void broadcast(double*, int64_t, int) override {}
  std::vector<std::string> allgather_text(const std::string& mine) override { return {mine}; }
  void abort(int) override {}

 private:
  static void copy(const double* from, int64_t n, double* to) {
    if (n > 0 && from != to) std::memmove(to, from, static_cast<size_t>(n) * sizeof(double));
  }
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

}  // namespace

std::unique_ptr<Comm> solo() { return std::make_unique<Solo>(); }

int launched_size() {
  if (int n = env_int("OMPI_COMM_WORLD_SIZE")) return n;
  if (int n = env_int("PMI_SIZE")) return n;
  if (int n = env_int("PMIX_SIZE")) return n;
  if (std::getenv("PMIX_RANK")) return 1;  // launched, size unknown here: at least one
  return 0;
}

}  // namespace gr::dist
