// SVG line charts; see svg.h.
#include "bench/common/svg.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sliced::bench {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b"};
constexpr double kWidth = 760, kPanelHeight = 220, kLeft = 70, kRight = 150,
                 kTop = 40, kGap = 50;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A "nice" tick step for the range.
double Step(double range) {
  if (range <= 0) return 1;
  const double raw = range / 5, mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

}  // namespace

std::string RenderSvg(const std::string& title, const std::string& x_label,
                      const std::vector<SvgPanel>& panels) {
  const double height = kTop + panels.size() * (kPanelHeight + kGap) + 10;
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"22\" font-size=\"14\" text-anchor=\"middle\">%s</text>\n",
      kWidth, height, kWidth / 2, Escape(title));
  const double plot_w = kWidth - kLeft - kRight;
  for (size_t p = 0; p < panels.size(); ++p) {
    const SvgPanel& panel = panels[p];
    const double top = kTop + p * (kPanelHeight + kGap);
    double x0 = INFINITY, x1 = -INFINITY, y1 = 0;
    for (const SvgSeries& s : panel.series) {
      for (double x : s.x) x0 = std::min(x0, x), x1 = std::max(x1, x);
      for (double y : s.y) y1 = std::max(y1, y);
    }
    if (!std::isfinite(x0)) x0 = 0, x1 = 1;
    if (x1 <= x0) x1 = x0 + 1;
    const double ystep = Step(y1 > 0 ? y1 : 1);
    y1 = std::max(ystep, std::ceil(y1 / ystep) * ystep);
    auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * plot_w; };
    auto py = [&](double y) { return top + kPanelHeight - y / y1 * kPanelHeight; };
    absl::StrAppendFormat(&out,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                          "fill=\"none\" stroke=\"#444\"/>\n",
                          kLeft, top, plot_w, kPanelHeight);
    for (double y = 0; y <= y1 + 1e-9; y += ystep) {
      absl::StrAppendFormat(&out,
                            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                            "text-anchor=\"end\">%g</text>\n",
                            kLeft, kLeft + plot_w, py(y), py(y), kLeft - 4,
                            py(y) + 4, y);
    }
    const double xstep = Step(x1 - x0);
    for (double x = std::ceil(x0 / xstep) * xstep; x <= x1 + 1e-9; x += xstep) {
      absl::StrAppendFormat(&out,
                            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                            px(x), top + kPanelHeight + 14, x);
    }
    absl::StrAppendFormat(&out,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n"
                          "<text transform=\"translate(16,%.1f) rotate(-90)\" "
                          "text-anchor=\"middle\">%s</text>\n",
                          kLeft + plot_w / 2, top + kPanelHeight + 30,
                          Escape(x_label), top + kPanelHeight / 2,
                          Escape(panel.y_label));
    for (size_t i = 0; i < panel.series.size(); ++i) {
      const SvgSeries& s = panel.series[i];
      const char* color = kColors[i % std::size(kColors)];
      std::string points;
      for (size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
        absl::StrAppendFormat(&points, "%.1f,%.1f ", px(s.x[k]), py(s.y[k]));
      }
      absl::StrAppendFormat(&out,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                            "points=\"%s\"/>\n"
                            "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"%s\" stroke-width=\"3\"/><text x=\"%.1f\" "
                            "y=\"%.1f\">%s</text>\n",
                            color, points, kLeft + plot_w + 10, kLeft + plot_w + 30,
                            top + 12 + 16 * i, top + 12 + 16 * i, color,
                            kLeft + plot_w + 34, top + 16 + 16 * i, Escape(s.name));
    }
  }
  out += "</svg>\n";
  return out;
}

}  // namespace sliced::bench
