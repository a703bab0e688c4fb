// folds.h — data.cv {"folds": K, "fold": i}: the validation rows are fold i of K (issue 41 item 6,
// `gradrun cv`). Every row is in exactly one fold; fold sizes differ by at most one row.
//
// perm = random_permutation(rows, seed, kSplitStream) (the split's own stream, random.h).
// Plain: the row at position j of perm goes to fold (j mod K) + 1.
// Stratified (a classifier: the labels of metrics.accuracy, else of a softmax_cross_entropy,
// cross_entropy or mean/sum of bce_with_logits loss, when they are a data input): the
// rows are grouped by their label's raw value (a category's text, the number or the row of numbers
// as read; with "threshold": value > t), groups in the order their first row appears in the file;
// then, group after group, each group's rows in perm order are dealt to folds by one running
// counter c: fold (c mod K) + 1, c += 1. So every class is spread over the folds as evenly as its
// count allows, and the folds' sizes still differ by at most one row.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spec/dataset.h"
#include "spec/spec.h"

namespace gr {

// The fold (1..K) of each of `raw`'s rows; K = spec.data->cv_folds. InputError at /data/cv/folds
// when K exceeds the rows.
std::vector<int64_t> assign_folds(const Spec& spec, const RawTable& raw);
// Whether assign_folds stratifies for this spec (it is a classifier, as above).
bool folds_stratified(const Spec& spec);
// The name of the input it stratifies by (empty when it does not).
std::string folds_label(const Spec& spec);

}  // namespace gr
