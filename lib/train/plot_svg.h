// plot_svg.h — a dependency-free SVG renderer for the loss curve that `gradrun train` writes as
// loss.svg: training loss per optimizer step and validation loss per epoch, readable in any
// browser or image viewer without other tools.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace gr {

struct LossPlot {
  std::string title;                                  // e.g. the spec name (XML-escaped on output)
  std::vector<double> train;                          // loss per optimizer step (x = step 1..n)
  std::vector<std::pair<double, double>> validation;  // (step at end of epoch, val loss); may be empty
  std::vector<std::pair<double, double>> epoch_train;  // (step at end of epoch, mean train loss); may be empty
};

// Returns a complete standalone SVG document (800x480, starts with "<svg", ends with "</svg>\n").
//  * y is log-scaled (ticks at powers of ten) when every finite loss is > 0 and they span more
//    than two decades; linear with 1-2-5 ticks otherwise. x is linear in steps.
//  * NaN/inf losses are skipped and leave a gap in the line.
//  * Long curves (per-step train, epoch-mean train, validation) are reduced to the min and max of
//    each pixel column (at most ~1.4k points each), so spikes stay visible while the file stays
//    small; a marker per epoch only for runs of at most 60 epochs.
//  * An empty `train` gives a framed plot that says "no data".
//  * Output is deterministic and locale-independent (numbers via std::to_chars).
std::string render_loss_svg(const LossPlot& plot);

}  // namespace gr
