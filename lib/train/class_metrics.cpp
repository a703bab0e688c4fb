// class_metrics.cpp — see class_metrics.h.
#include "train/class_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "train/evaluate.h"

namespace gr {

namespace {

double softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z))); }

// The integers' ratio, 0 when the denominator is 0.
double ratio(int64_t num, int64_t den) { return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den); }

}  // namespace

void ClassTally::add(int64_t truth, const double* x, int64_t cols) {
  if (truth < 0 || truth >= classes_) {
    invalid_ = true;
    return;
  }
  truth_.push_back(truth);
  predicted_.push_back(predicted_class(x, cols));
  if (classes_ != 2) return;
  if (cols == 1) {  // one logit: p(class 1) = sigmoid(x), as predict computes it
    score_.push_back(1.0 / (1.0 + std::exp(-x[0])));
    log_loss_sum_ = log_loss_sum_ + (truth == 1 ? softplus(-x[0]) : softplus(x[0]));
  } else {  // two columns: the softmax's second column
    const double m = std::max(x[0], x[1]);
    const double e0 = std::exp(x[0] - m), e1 = std::exp(x[1] - m);
    score_.push_back(e1 / (e0 + e1));
    log_loss_sum_ = log_loss_sum_ + (m + std::log(e0 + e1) - x[truth]);
  }
}

ClassMetrics ClassTally::finish() const {
  ClassMetrics m;
  const size_t n = truth_.size();
  if (n == 0 || classes_ <= 0 || invalid_) return m;
  const int64_t k = classes_;
  m.classes = k;
  m.binary = k == 2;
  m.confusion.assign(static_cast<size_t>(k * k), 0);
  m.support.assign(static_cast<size_t>(k), 0);
  m.predicted.assign(static_cast<size_t>(k), 0);
  for (size_t i = 0; i < n; ++i) {
    ++m.confusion[static_cast<size_t>(truth_[i] * k + predicted_[i])];
    ++m.support[static_cast<size_t>(truth_[i])];
    ++m.predicted[static_cast<size_t>(predicted_[i])];
  }
  double f1_sum = 0.0, recall_sum = 0.0;
  int64_t f1_count = 0, recall_count = 0;
  for (int64_t c = 0; c < k; ++c) {
    const int64_t tp = m.confusion[static_cast<size_t>(c * k + c)];
    const int64_t fp = m.predicted[static_cast<size_t>(c)] - tp, fn = m.support[static_cast<size_t>(c)] - tp;
    m.precision.push_back(ratio(tp, tp + fp));
    m.recall.push_back(ratio(tp, tp + fn));
    m.f1.push_back(ratio(2 * tp, 2 * tp + fp + fn));
    if (m.support[static_cast<size_t>(c)] + m.predicted[static_cast<size_t>(c)] > 0) f1_sum = f1_sum + m.f1.back(), ++f1_count;
    if (m.support[static_cast<size_t>(c)] > 0) recall_sum = recall_sum + m.recall.back(), ++recall_count;
  }
  m.macro_f1 = f1_sum / static_cast<double>(f1_count);
  m.balanced_accuracy = recall_count ? recall_sum / static_cast<double>(recall_count) : ClassMetrics::kNaN;
  if (!m.binary || score_.size() != n) return m;
  m.log_loss = log_loss_sum_ / static_cast<double>(n);
  const int64_t pos = m.support[1], neg = m.support[0];
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score_[a] < score_[b]; });
  if (pos > 0 && neg > 0) {  // ROC-AUC: the Mann–Whitney statistic with tied ranks averaged
    double rank_sum = 0.0;  // ranks are halves of integers: exact
    for (size_t s = 0; s < n;) {
      size_t e = s;
      while (e < n && score_[order[e]] == score_[order[s]]) ++e;
      const double mean_rank = (static_cast<double>(s + 1) + static_cast<double>(e)) / 2.0;
      for (size_t i = s; i < e; ++i)
        if (truth_[order[i]] == 1) rank_sum = rank_sum + mean_rank;
      s = e;
    }
    const double p = static_cast<double>(pos), q = static_cast<double>(neg);
    m.roc_auc = (rank_sum - p * (p + 1.0) / 2.0) / (p * q);
  }
  if (pos > 0) {  // average precision: thresholds at the distinct scores, highest first
    double sum = 0.0;
    int64_t tp = 0, fp = 0;
    for (size_t e = n; e > 0;) {
      size_t s = e;
      while (s > 0 && score_[order[s - 1]] == score_[order[e - 1]]) --s;
      int64_t dtp = 0;
      for (size_t i = s; i < e; ++i) (truth_[order[i]] == 1 ? dtp : fp) += 1;
      tp += dtp;
      if (dtp > 0) sum = sum + static_cast<double>(dtp) * ratio(tp, tp + fp);
      e = s;
    }
    m.pr_auc = sum / static_cast<double>(pos);
  }
  return m;
}

}  // namespace gr
