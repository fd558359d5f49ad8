// SVG loss curves (contract and layout: include/bitrank/train/plot.hpp).
#include "bitrank/train/plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>

#include "bitrank/error.hpp"

namespace bitrank::train {

namespace {

constexpr double kLeft = 72, kRight = 16, kLegend = 150, kTop = 32, kBottom = 48;
constexpr std::size_t kDistinct = 10, kLegendMax = 12;
constexpr std::array<const char*, kDistinct> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
  return out;
}

// Series i of n: distinct colours up to kDistinct, else a dark-blue → yellow ramp.
std::string colour(std::size_t i, std::size_t n) {
  if (n <= kDistinct) return kPalette[i];
  static constexpr std::array<std::array<double, 3>, 5> stops = {
      {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
  const double t = static_cast<double>(i) / static_cast<double>(n - 1) * (stops.size() - 1);
  const auto k = std::min<std::size_t>(static_cast<std::size_t>(t), stops.size() - 2);
  const double f = t - static_cast<double>(k);
  std::array<int, 3> c{};
  for (int j = 0; j < 3; ++j) c[j] = static_cast<int>(std::lround(stops[k][j] + f * (stops[k + 1][j] - stops[k][j])));
  return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
}

template <class... Args>
void put(std::string& svg, fmt::format_string<Args...> f, Args&&... args) {
  fmt::format_to(std::back_inserter(svg), f, std::forward<Args>(args)...);
}

struct Tick {
  double at;  // in axis units (log10 of the value on a log axis)
  std::string label;
};

std::string linear_label(double v, double step) {
  if (std::abs(v) < step * 1e-9) v = 0;  // no "-0"
  if (std::abs(v) >= 1e6 || step < 1e-5) return fmt::format("{:.3g}", v);
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", v, decimals);
}

std::vector<Tick> linear_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 6;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
  std::vector<Tick> ticks;
  for (auto k = static_cast<long long>(std::ceil(lo / step - 1e-9)); k * step <= hi + step * 1e-9; ++k)
    ticks.push_back({static_cast<double>(k) * step, linear_label(static_cast<double>(k) * step, step)});
  return ticks;
}

// lo, hi in log10 units.
std::vector<Tick> log_ticks(double lo, double hi) {
  std::vector<Tick> ticks;
  const bool fine = hi - lo < 3;
  const auto stride = static_cast<long long>(std::max(1.0, std::ceil((hi - lo) / 10)));  // ≤ ~10 decades labelled
  for (auto k = static_cast<long long>(std::floor(lo / stride)) * stride; k <= static_cast<long long>(std::ceil(hi));
       k += stride)
    for (const double m : {1.0, 2.0, 5.0}) {
      if (m != 1 && !fine) continue;
      const double at = static_cast<double>(k) + std::log10(m);
      if (at >= lo - 1e-9 && at <= hi + 1e-9) ticks.push_back({at, fmt::format("{:g}", m * std::pow(10.0, k))});
    }
  if (ticks.size() < 2) {  // less than a factor 2 of range: linear ticks in value space, placed on the log axis
    ticks.clear();
    for (const Tick& t : linear_ticks(std::pow(10.0, lo), std::pow(10.0, hi)))
      if (t.at > 0) ticks.push_back({std::log10(t.at), t.label});
  }
  return ticks;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

}  // namespace

std::string plot_svg(std::span<const PlotSeries> series, const PlotOptions& o) {
  if (o.width < 320 || o.height < 240) fail("plot: size {}×{} is below 320×240", o.width, o.height);
  const bool log_y = o.log_y;
  auto drawable = [&](double x, double y) { return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0); };
  auto ty = [&](double y) { return log_y ? std::log10(y) : y; };

  Range xr, yr;
  for (const PlotSeries& s : series) {
    if (s.x.size() != s.y.size())
      fail("plot: series \"{}\" has {} x values but {} y values", s.name, s.x.size(), s.y.size());
    for (std::size_t i = 0; i < s.x.size(); ++i)
      if (drawable(s.x[i], s.y[i])) {
        xr.add(s.x[i]);
        yr.add(ty(s.y[i]));
      }
  }
  if (!(xr.lo <= xr.hi)) fail("plot: \"{}\" has no drawable point (finite{})", o.title, log_y ? " and > 0" : "");
  if (xr.lo == xr.hi) {
    xr.lo -= 1;
    xr.hi += 1;
  }
  if (yr.lo == yr.hi) {
    const double w = log_y ? 0.5 : 1.0;  // ×/÷ √10 on a log axis
    yr.lo -= w;
    yr.hi += w;
  } else {
    const double pad = 0.04 * (yr.hi - yr.lo);
    yr.lo -= pad;
    yr.hi += pad;
  }

  const bool legend = series.size() >= 2;
  const double L = kLeft, T = kTop;
  const double W = o.width - kLeft - kRight - (legend ? kLegend : 0), H = o.height - kTop - kBottom;
  auto px = [&](double x) { return L + (x - xr.lo) / (xr.hi - xr.lo) * W; };
  auto py = [&](double y) { return T + (1 - (ty(y) - yr.lo) / (yr.hi - yr.lo)) * H; };

  std::string svg;
  put(svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  put(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      o.width, o.height);
  put(svg, "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n", o.width, o.height);
  put(svg, "<text x=\"{:.2f}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n", L + W / 2, escape(o.title));

  // Grid, ticks and labels.
  put(svg, "<g stroke=\"#e0e0e0\" stroke-width=\"1\">\n");
  const std::vector<Tick> xt = linear_ticks(xr.lo, xr.hi);
  const std::vector<Tick> yt = log_y ? log_ticks(yr.lo, yr.hi) : linear_ticks(yr.lo, yr.hi);
  for (const Tick& t : xt) put(svg, "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\"/>\n", px(t.at), T, T + H);
  for (const Tick& t : yt) {
    const double y = T + (1 - (t.at - yr.lo) / (yr.hi - yr.lo)) * H;
    put(svg, "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{2:.2f}\" y2=\"{1:.2f}\"/>\n", L, y, L + W);
  }
  put(svg, "</g>\n<g stroke=\"black\" stroke-width=\"1\">\n");
  for (const Tick& t : xt) put(svg, "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\"/>\n", px(t.at), T + H, T + H + 5);
  for (const Tick& t : yt) {
    const double y = T + (1 - (t.at - yr.lo) / (yr.hi - yr.lo)) * H;
    put(svg, "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{2:.2f}\" y2=\"{1:.2f}\"/>\n", L - 5, y, L);
  }
  put(svg, "</g>\n<g text-anchor=\"middle\">\n");
  for (const Tick& t : xt) put(svg, "<text x=\"{:.2f}\" y=\"{:.2f}\">{}</text>\n", px(t.at), T + H + 18, escape(t.label));
  put(svg, "</g>\n<g text-anchor=\"end\">\n");
  for (const Tick& t : yt) {
    const double y = T + (1 - (t.at - yr.lo) / (yr.hi - yr.lo)) * H;
    put(svg, "<text x=\"{:.2f}\" y=\"{:.2f}\">{}</text>\n", L - 8, y + 4, escape(t.label));
  }
  put(svg, "</g>\n");
  put(svg, "<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", L + W / 2, o.height - 10, escape(o.x_label));
  put(svg, "<text x=\"16\" y=\"{0:.2f}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {0:.2f})\">{1}{2}</text>\n",
      T + H / 2, escape(o.y_label), log_y ? " (log scale)" : "");

  // Curves, clipped to the plot area.
  put(svg, "<defs><clipPath id=\"plot-area\"><rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\"/></clipPath></defs>\n",
      L, T, W, H);
  const std::size_t thin_above = static_cast<std::size_t>(2 * W);
  for (std::size_t si = 0; si < series.size(); ++si) {
    const PlotSeries& s = series[si];
    put(svg, "<g clip-path=\"url(#plot-area)\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" stroke-linejoin=\"round\">"
        "<title>{}</title>\n",
        colour(si, series.size()), escape(s.name));
    const bool thin = s.x.size() > thin_above;
    std::size_t i = 0;
    while (i < s.x.size()) {
      if (!drawable(s.x[i], s.y[i])) {
        ++i;
        continue;
      }
      std::size_t end = i;  // [i, end): one run of drawable points
      while (end < s.x.size() && drawable(s.x[end], s.y[end])) ++end;
      std::vector<std::size_t> keep;
      if (!thin) {
        for (std::size_t k = i; k < end; ++k) keep.push_back(k);
      } else {
        for (std::size_t a = i; a < end;) {  // one pixel column: first, lowest, highest, last
          const auto col = static_cast<long long>(std::floor(px(s.x[a])));
          std::size_t b = a, lo = a, hi = a;
          while (b < end && static_cast<long long>(std::floor(px(s.x[b]))) == col) {
            if (s.y[b] < s.y[lo]) lo = b;
            if (s.y[b] > s.y[hi]) hi = b;
            ++b;
          }
          std::array<std::size_t, 4> pick = {a, std::min(lo, hi), std::max(lo, hi), b - 1};
          for (const std::size_t k : pick)
            if (keep.empty() || keep.back() < k) keep.push_back(k);
          a = b;
        }
      }
      put(svg, "<polyline points=\"");
      for (std::size_t n = 0; n < keep.size(); ++n)
        put(svg, "{}{:.2f},{:.2f}", n ? " " : "", px(s.x[keep[n]]), py(s.y[keep[n]]));
      // A lone point still shows: a zero-length line with round caps.
      put(svg, "\"{}/>\n", keep.size() == 1 ? " stroke-linecap=\"round\" stroke-width=\"3\"" : "");
      i = end;
    }
    put(svg, "</g>\n");
  }
  put(svg, "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"none\" stroke=\"black\"/>\n", L, T, W, H);

  if (legend) {
    std::vector<std::size_t> shown;
    const std::size_t n = series.size();
    if (n <= kLegendMax) {
      for (std::size_t k = 0; k < n; ++k) shown.push_back(k);
    } else {
      for (std::size_t k = 0; k < kLegendMax; ++k) shown.push_back((k * (n - 1) + (kLegendMax - 1) / 2) / (kLegendMax - 1));
    }
    const double lx = L + W + 12;
    double ly = T + 10;
    put(svg, "<g>\n");
    for (const std::size_t k : shown) {
      std::string name = series[k].name;
      if (name.size() > 18) name = name.substr(0, 17) + "~";
      put(svg, "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{2:.2f}\" y2=\"{1:.2f}\" stroke=\"{3}\" stroke-width=\"3\"/>"
          "<text x=\"{4:.2f}\" y=\"{5:.2f}\">{6}</text>\n",
          lx, ly, lx + 18, colour(k, n), lx + 24, ly + 4, escape(name));
      ly += 16;
    }
    if (shown.size() < n) put(svg, "<text x=\"{:.2f}\" y=\"{:.2f}\">({} series)</text>\n", lx, ly + 4, n);
    put(svg, "</g>\n");
  }
  put(svg, "</svg>\n");
  return svg;
}

void write_plot_svg(const std::filesystem::path& path, std::span<const PlotSeries> series, const PlotOptions& options) {
  const std::string svg = plot_svg(series, options);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("plot: cannot write {}", path.string());
  f.write(svg.data(), static_cast<std::streamsize>(svg.size()));
  f.close();
  if (!f) fail("plot: writing {} failed", path.string());
}

std::vector<PlotSeries> loss_series(std::span<const StepRecord> records, bool per_block) {
  std::vector<PlotSeries> out(1);
  out[0].name = "loss";
  for (const StepRecord& r : records) {
    if (r.skipped) continue;
    out[0].x.push_back(static_cast<double>(r.step));
    out[0].y.push_back(r.loss);
    if (!per_block) continue;
    for (std::size_t b = 0; b < r.block_loss.size(); ++b) {
      if (out.size() <= b + 1) out.push_back({fmt::format("block {}", b), {}, {}});
      out[b + 1].x.push_back(static_cast<double>(r.step));
      out[b + 1].y.push_back(r.block_loss[b]);
    }
  }
  return out;
}

}  // namespace bitrank::train
