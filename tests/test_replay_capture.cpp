// test_replay_capture.cpp — captured episodes on a shared backend (issue 10, part 5):
//  - an error inside capture_episode surfaces as itself, not as end_capture's "invalidated" (on CUDA
//    a failed launch invalidates the stream capture, and the host backend models that);
//  - an episode belongs to the program that captured it: after program B captures on the same
//    backend, A's run_episode refuses (it would replay B's graph on B's buffers) until A re-captures;
//  - destroying the program that owns the backend's episode drops it (its launches point into the
//    buffers the destructor frees); destroying a program that no longer owns it changes nothing.
// The same for lib/fuse's FusedProgram.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "device/backend.h"
#include "fuse/fuse.h"
#include "grad/optimizer.h"
#include "grad/tape.h"
#include "replay/replay.h"
#include "support/replay_support.h"
#include "support/rng.h"

using namespace gr;
using namespace gr::replaytest;

namespace {

// The host backend with one injected failure: the `fail_at`-th launch inside a capture (1-based)
// is forwarded with grid 0, so the host backend itself rejects it and invalidates the capture.
class FailingBackend final : public device::Backend {
 public:
  explicit FailingBackend(std::unique_ptr<device::Backend> inner) : in_(std::move(inner)) {}
  int fail_at = 0;  // 0: never

  std::string name() const override { return in_->name(); }
  device::Capabilities capabilities() const override { return in_->capabilities(); }
  std::string describe() const override { return in_->describe(); }
  device::Module* compile(const std::string& s, const std::string& n) override { return in_->compile(s, n); }
  device::Kernel* kernel(device::Module* m, const std::string& n) override { return in_->kernel(m, n); }
  device::Buffer alloc(size_t bytes) override { return in_->alloc(bytes); }
  void free(device::Buffer b) override { in_->free(b); }
  void upload(device::Buffer d, const void* s, size_t n, size_t o) override { in_->upload(d, s, n, o); }
  void download(void* d, device::Buffer s, size_t n, size_t o) override { in_->download(d, s, n, o); }
  void launch(device::Kernel* k, unsigned grid, unsigned block, void** args) override {
    if (capturing_ && fail_at > 0 && ++launches_ == fail_at) grid = 0;
    in_->launch(k, grid, block, args);
  }
  unsigned max_block(device::Kernel* k) const override { return in_->max_block(k); }
  void synchronize() override { in_->synchronize(); }
  void begin_capture() override {
    in_->begin_capture();
    capturing_ = true;
    launches_ = 0;
  }
  void end_capture() override {
    capturing_ = false;
    in_->end_capture();
  }
  void replay() override { in_->replay(); }
  bool has_capture() const override { return in_->has_capture(); }
  uint64_t capture_id() const override { return in_->capture_id(); }
  void abort_capture() noexcept override {
    capturing_ = false;
    in_->abort_capture();
  }
  void clear_capture() noexcept override { in_->clear_capture(); }

 private:
  std::unique_ptr<device::Backend> in_;
  bool capturing_ = false;
  int launches_ = 0;
};

// The replay tests' MLP with its CPU optimizer, built in place (cpu_run(true, n) is its reference).
struct Net {
  Tape tape;
  Mlp m;
  Optimizer cpu;
  Var loss;
  Net() : m(leaves(tape)), cpu(make_opt(tape, m, true)), loss(record(tape, m)) {}
  static Mlp leaves(Tape& tape) {
    Rng rng(1234);  // cpu_run's seed
    return make_leaves(tape, rng);
  }
};

// One training step through a captured episode, re-capturing first when `recapture`.
template <class P>
double step(P& prog, replay::Program& base, replay::DeviceOptimizer& opt, const Mlp& m, const Batch& b,
            bool recapture) {
  base.set_input(m.x, b.x);
  base.set_input(m.t, b.t);
  if (recapture) prog.capture_episode(&opt);
  prog.run_episode(&opt);
  return base.loss();
}

}  // namespace

TEST_CASE("replay: a launch that fails inside capture_episode surfaces as itself", "[replay][capture]") {
  FailingBackend be(host());
  Net n;
  replay::Program prog(be, n.tape, n.loss);
  replay::DeviceOptimizer opt(prog, n.cpu);
  be.fail_at = 3;
  // Before the fix, the catch block ended the capture and threw the host backend's (like CUDA's)
  // "capture was invalidated" in place of the launch's own message.
  CHECK_THROWS_WITH(prog.capture_episode(&opt), Catch::Contains("grid 0") && !Catch::Contains("invalidated"));
  CHECK_FALSE(prog.has_episode());
  CHECK_FALSE(be.has_capture());
  CHECK_THROWS_WITH(prog.run_episode(&opt), Catch::Contains("no captured episode"));
  // The backend is not left capturing: a clean capture works and trains like the CPU tape.
  be.fail_at = 0;
  prog.capture_episode(&opt);
  const RunResult cpu = cpu_run(true, 6);
  const std::vector<Batch> bs = batches(6);
  for (size_t i = 0; i < bs.size(); ++i) CHECK(step(prog, prog, opt, n.m, bs[i], false) == cpu.losses[i]);
}

TEST_CASE("replay: an episode belongs to the program that captured it", "[replay][capture]") {
  auto be = host();
  Net a, b;
  replay::Program pa(*be, a.tape, a.loss), pb(*be, b.tape, b.loss);
  replay::DeviceOptimizer oa(pa, a.cpu), ob(pb, b.cpu);
  const std::vector<Batch> bs = batches(8);
  const RunResult cpu = cpu_run(true, 8);
  pa.capture_episode(&oa);
  CHECK(pa.has_episode());
  pb.capture_episode(&ob);
  CHECK(pb.has_episode());
  CHECK_FALSE(pa.has_episode());
  // Before the fix this replayed B's episode: B's step ran, A's did not, and nothing said so.
  pa.set_input(a.m.x, bs[0].x);
  pa.set_input(a.m.t, bs[0].t);
  CHECK_THROWS_WITH(pa.run_episode(&oa), Catch::Contains("captured by another program"));
  CHECK(oa.owner().t() == 0);  // the owner's counter: no step ran
  CHECK(ob.owner().t() == 0);
  // Taking turns on one backend, each re-capturing before its step: both train like the tape.
  for (size_t i = 0; i < bs.size(); ++i) {
    CHECK(step(pa, pa, oa, a.m, bs[i], true) == cpu.losses[i]);
    CHECK(step(pb, pb, ob, b.m, bs[i], true) == cpu.losses[i]);
  }
}

TEST_CASE("replay: destroying the capturing program drops the backend's episode", "[replay][capture]") {
  auto be = host();
  Net a, b;
  {
    replay::Program pa(*be, a.tape, a.loss);
    pa.capture_episode();
    REQUIRE(be->has_capture());
  }
  // Before the fix the episode survived, pointing into the program's freed buffers.
  CHECK_FALSE(be->has_capture());
  CHECK(be->capture_id() == 0);
  CHECK_THROWS_AS(be->replay(), gr::Error);
  // A program destroyed after another one captured leaves that one's episode alone.
  replay::Program pb(*be, b.tape, b.loss);
  replay::DeviceOptimizer ob(pb, b.cpu);
  {
    replay::Program pa(*be, a.tape, a.loss);
    pa.capture_episode();
    pb.capture_episode(&ob);
  }
  REQUIRE(pb.has_episode());
  const RunResult cpu = cpu_run(true, 3);
  const std::vector<Batch> bs = batches(3);
  for (size_t i = 0; i < bs.size(); ++i) CHECK(step(pb, pb, ob, b.m, bs[i], false) == cpu.losses[i]);
}

TEST_CASE("fuse: FusedProgram episodes: errors surface, ownership, destruction", "[replay][capture][fuse]") {
  FailingBackend be(host());
  Net n;
  replay::Program prog(be, n.tape, n.loss);
  replay::DeviceOptimizer opt(prog, n.cpu);
  const RunResult cpu = cpu_run(true, 4);
  const std::vector<Batch> bs = batches(4);
  {
    fuse::FusedProgram fp(prog, fuse::plan(prog));
    be.fail_at = 2;
    CHECK_THROWS_WITH(fp.capture_episode(&opt), Catch::Contains("grid 0") && !Catch::Contains("invalidated"));
    CHECK_FALSE(fp.has_episode());
    be.fail_at = 0;
    fp.capture_episode(&opt);
    CHECK(step(fp, prog, opt, n.m, bs[0], false) == cpu.losses[0]);
    // The per-node program captures on the same backend: the fused episode is no longer fp's.
    prog.capture_episode(&opt);
    CHECK_FALSE(fp.has_episode());
    CHECK_THROWS_WITH(fp.run_episode(&opt), Catch::Contains("captured by another program"));
    CHECK(step(prog, prog, opt, n.m, bs[1], false) == cpu.losses[1]);
    // And back: fp re-captures, prog's episode is gone.
    CHECK(step(fp, prog, opt, n.m, bs[2], true) == cpu.losses[2]);
    CHECK_FALSE(prog.has_episode());
    CHECK_THROWS_WITH(prog.run_episode(&opt), Catch::Contains("captured by another program"));
  }
  // fp owned the episode; its table is freed, so the episode went with it.
  CHECK_FALSE(be.has_capture());
  CHECK(step(prog, prog, opt, n.m, bs[3], true) == cpu.losses[3]);
}
