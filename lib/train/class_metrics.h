// class_metrics.h — a classifier's per-class numbers (issue 41 item 5): the confusion matrix,
// per-class precision, recall, F1 and support, macro-F1, balanced accuracy, and for binary tasks
// ROC-AUC, PR-AUC and log loss. `gradrun evaluate` prints them (--json writes them), metrics.csv
// keeps val_f1 (macro) and, for binary tasks, val_auc, and early stopping may monitor both.
//
// Definitions (docs/cli.md, evaluate), with tp, fp, fn counted per class c over the rows:
//   predicted class: predicted_class (evaluate.h): the argmax of the logits, or for one logit
//     (a binary classifier) 1 ⇔ logit > 0; the true class: the label's id (one-hot: its argmax);
//   precision_c = tp / (tp + fp), recall_c = tp / (tp + fn), F1_c = 2tp / (2tp + fp + fn), each one
//     division of integers (0 when the denominator is 0, as scikit-learn's zero_division=0);
//   macro-F1: the mean of F1_c over the classes that occur in the labels or the predictions, summed
//     in class order; balanced accuracy: the mean of recall_c over the classes that occur in the
//     labels (scikit-learn's balanced_accuracy_score);
//   binary tasks (one logit, or two columns): the score of a row is the probability of class 1 as
//     predict computes it (1 / (1 + exp(−x)), or the softmax's second column);
//   ROC-AUC: (Σ ranks of the positives − P(P+1)/2) / (P·N), ranks 1-based by ascending score, tied
//     scores taking the mean of their ranks (exactly the trapezoidal area under the ROC curve); NaN
//     when one class is absent;
//   PR-AUC: average precision, Σ over the distinct scores descending of Δtp · tp / (tp + fp), over P
//     (the step-wise area, no interpolation; tied scores form one threshold: scikit-learn's
//     average_precision_score); NaN without positives;
//   log loss: the mean over rows, in row order, of −log p(true class) computed from the logits
//     without rounding p first: softplus(−x) for class 1 and softplus(x) for class 0 with one logit
//     (softplus(z) = max(z, 0) + log1p(exp(−|z|))), logsumexp(x) − x_true with two columns.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gr {

struct ClassMetrics {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  int64_t classes = 0;  // 0: not a classifier (or no rows)
  bool binary = false;
  std::vector<int64_t> confusion;  // [classes, classes] row-major: [true class][predicted class]
  std::vector<int64_t> support, predicted;  // per class: rows of that true class; rows predicted as it
  std::vector<double> precision, recall, f1;
  double macro_f1 = kNaN, balanced_accuracy = kNaN;
  double roc_auc = kNaN, pr_auc = kNaN, log_loss = kNaN;  // binary tasks
};

// Collects rows one by one (in the evaluation's row order) and computes ClassMetrics at the end.
class ClassTally {
 public:
  // `classes`: the logits' columns, or 2 for one logit.
  explicit ClassTally(int64_t classes) : classes_(classes) {}
  // One row: its true class and its logits (`cols` of them: 1 for a one-logit binary classifier).
  // A true class outside [0, classes) (a label that is no class: soft 0.3 targets of a BCE) makes
  // the rows no classification: finish() then reports none (classes 0).
  void add(int64_t truth, const double* logits, int64_t cols);
  ClassMetrics finish() const;

 private:
  int64_t classes_;
  std::vector<int64_t> truth_, predicted_;
  std::vector<double> score_;    // binary: the probability of class 1
  double log_loss_sum_ = 0.0;    // binary: Σ −log p(true class), rows in order
  bool invalid_ = false;         // a row whose label is no class
};

// The class count of a classifier's logits of `cols` columns (one logit: 2).
inline int64_t class_count(int64_t cols) { return cols == 1 ? 2 : cols; }

}  // namespace gr
