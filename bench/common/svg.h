// A small SVG line-chart writer (no dependency): stacked panels sharing an
// x axis, one polyline per series, axes with ticks, a legend.
//
//   SvgPanel util{"TPU utilization", {{"sliced", xs, ys}, ...}};
//   std::string svg = RenderSvg("Quality replay", "time (h)", {util, wait});
//
// Pure functions; thread-safe.
#ifndef SLICED_BENCH_COMMON_SVG_H_
#define SLICED_BENCH_COMMON_SVG_H_

#include <string>
#include <vector>

namespace sliced::bench {

struct SvgSeries {
  std::string name;
  std::vector<double> x, y;  // same length
};

struct SvgPanel {
  std::string y_label;
  std::vector<SvgSeries> series;
};

// Renders the panels one above the other, 760 px wide.
std::string RenderSvg(const std::string& title, const std::string& x_label,
                      const std::vector<SvgPanel>& panels);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_COMMON_SVG_H_
