// checks.h — `gradrun check --fd` and `gradrun grad`: gradients on the first training batch.
//
// The first batch is the one training would take first: the first batch_size rows of epoch 1's
// order (shuffled by the spec's seed when shuffle is on); without data, the spec's consts.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/model.h"

namespace gr {

struct FdOptions {
  double eps = 1e-6;       // central difference step (absolute)
  double rtol = 1e-4;      // pass when |analytic − fd| ≤ atol + rtol · max(|analytic|, |fd|)
  double atol = 1e-7;
  int64_t max_elems = 16;  // per parameter; evenly spaced flat indices when it has more
};

struct FdRow {
  std::string param;
  int64_t elements = 0;
  double max_abs = 0.0, max_rel = 0.0;
  bool pass = true;
  // The element to show: of a failing parameter, the failing element furthest beyond its tolerance
  // (excess = |analytic − fd| / (atol + rtol · scale)); of a passing one, the largest error.
  int64_t worst_index = -1;
  double worst_analytic = 0.0, worst_fd = 0.0, worst_excess = 0.0;
  int64_t failing = 0;  // elements beyond their tolerance
};

std::vector<int64_t> first_batch_rows(const Model& model);

// Loss and every parameter's gradient at the current parameter values, on the first batch.
struct GradResult {
  double loss = 0.0;
  std::vector<std::vector<double>> grads;  // registration order
};
GradResult evaluate_gradients(Model& model);

std::vector<FdRow> check_finite_differences(Model& model, const FdOptions& options);

}  // namespace gr
