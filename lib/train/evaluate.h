// evaluate.h — a model's loss and metrics on a table of rows with its current parameters:
// training's validation numbers (metrics.csv val_*), its train accuracy, and `gradrun evaluate`.
// Everything runs on the CPU tape in a fixed order (rows ascending, columns ascending), so a run
// on any device path, whose parameters are the tape's bit for bit, gets the same bits here.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "io/errors.h"
#include "train/class_metrics.h"
#include "train/model.h"

namespace gr {

struct Evaluation {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  // loss: the mean over batches weighted by rows; accuracy: predicted_class of the metric's logits
  // equals the labels' (NaN without metrics.accuracy), over rows × positions for a sequence's logits
  // [B, T, C] (next-token accuracy: the mean over every position of every row); mae, rmse: over every element of the
  // regression output, in the target's data units (a standardized target is mapped back with the
  // training rows' mean and std); r2: the mean over output columns of 1 − SS_res/SS_tot, SS_tot
  // about the column's mean over the table's rows (a constant column's r2 is NaN; unit-free).
  // NaN where not applicable.
  double loss = kNaN, accuracy = kNaN, mae = kNaN, rmse = kNaN, r2 = kNaN;
  // A classifier (metrics.accuracy): the confusion matrix and per-class numbers (class_metrics.h);
  // classes 0 otherwise.
  ClassMetrics classes;
};

// The regression a spec measures: metrics.regression, else a loss node of op mse whose inputs are
// a graph node (the prediction) and a data input of the same shape, in either order.
struct Regression {
  int output = -1;  // program node index; -1: not a regression model
  int target = -1;  // program input index
};
// Throws InputError at /metrics/regression/... when a declared regression does not fit the graph.
Regression regression_of(const Model& model);
Regression regression_of(const Program& program);

// The classifier whose class metrics (class_metrics.h) evaluate reports: the accuracy metric's
// logits and labels, else the loss's — softmax_cross_entropy(logits, one-hot data input),
// cross_entropy(logits, ids input), or the mean or sum of bce_with_logits(logit [B,1], 0/1 input)
// (weighted or not: spec/class_weight.h). logits -1: not a classifier.
struct Classifier {
  int logits = -1;  // program node index
  int labels = -1;  // program input index
  bool ids = false, binary = false;  // labels are class ids / one logit with 0/1 labels
  // A sequence (metrics.accuracy on logits [B, T, C]): T classifications per row, counted position
  // by position (rows ascending, positions ascending); 1 otherwise.
  int64_t positions = 1;
};
Classifier classifier_of(const Program& program);
// The class count of classifier_of (its logits' columns, a sequence's last axis; one logit: 2), 0
// without one.
int64_t classifier_classes(const Program& program);

// Every row counts: when the graph's fixed shapes cannot take the last partial batch it throws
// unfit_batch_error (`rows_name` says whose rows) rather than leave those rows out, unless
// `skip_unfit` (train accuracy: then those rows are left out). Both NaN for no rows.
Evaluation evaluate_metrics(Model& model, const DataTable& table, const std::string& rows_name = "the validation split",
                            bool skip_unfit = false);
// Training's val_loss/val_accuracy and `gradrun evaluate`: evaluate_metrics' loss and accuracy.
std::pair<double, double> evaluate(Model& model, const DataTable& table, const std::string& rows_name = "the validation split");
// metrics.csv train_accuracy: the accuracy over the training rows with the parameters at the end of
// the epoch (rows of a last partial batch the graph's fixed shapes cannot take left out); NaN
// without an accuracy metric or data.
double train_accuracy(Model& model);

// The size of `table`'s last partial batch when the graph's fixed shapes cannot take it (so
// evaluate would refuse the table), else 0. Records and resets the tape once.
int64_t unfit_last_batch(Model& model, const DataTable& table);
// The located error (at /train/batch_size) for such a table, saying what to change.
InputError unfit_batch_error(const Model& model, int64_t table_rows, const std::string& rows_name);
// Index of the largest of x[0..cols) (the first on ties).
int64_t argmax_row(const double* x, int64_t cols);
// A row's class as accuracy, evaluate and predict count it: the argmax of its logits, or for one
// logit (a binary classifier) 1 when the logit is > 0 (probability > 0.5), else 0.
int64_t predicted_class(const double* x, int64_t cols);
// A standardized value back in the data's units: z·std + mean (two roundings, no fma), the inverse
// of the standardization (x − mean) / std (spec/dataset.h). predict, evaluate and the exports use it.
inline double to_data_units(double z, double mean, double std) { return z * std + mean; }

}  // namespace gr
