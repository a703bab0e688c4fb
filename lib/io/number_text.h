// number_text.h — the one way gradrun writes a double as text: the shortest decimal that reads back
// as the same bits (std::to_chars: 0.99, not 0.98999999999999999), locale-free; NaN of either sign
// is "nan" and infinities are "inf"/"-inf", which every CSV reader (numpy, pandas, ours) reads back.
// Used by metrics.csv, predictions, generated-text probabilities, category names of numeric columns
// and messages.
#pragma once

#include <string>

namespace gr {

std::string format_shortest(double v);

}  // namespace gr
