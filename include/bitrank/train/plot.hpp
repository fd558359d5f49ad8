// Loss curves as SVG (DESIGN §7: a loss-curve plot beside the output):
// self-contained SVG 1.1 text, no fonts, scripts or other files needed.
//
// Layout (pixels, origin top left): the plot area is the canvas less a
// margin — left 72, right 16 (+ 150 for the legend when there are two or
// more series), top 32 (title), bottom 48 (x labels). x is linear; y is
// linear, or log10 with `log_y` (then values ≤ 0 are not drawn). Axis
// ranges cover every drawable point (y padded by 4% of its span, in log
// space for log_y; a zero span is widened by ±1, or ×/÷ √10 for log_y).
// Ticks: linear axes at multiples of 1, 2 or 5 × 10^k, about 6 per axis;
// log axes at each power of ten (every k-th when more than 10 decades), and
// at 2 and 5 times it when the range covers fewer than 3 decades (less than
// a factor 2: linear ticks placed on the log axis). Light grid lines.
//
// Series: one <polyline> per run of consecutive drawable points (a NaN, Inf
// or, for log_y, non-positive value breaks the line), inside a <g> whose
// <title> is the series name. Points are written with 2 decimals in pixel
// units; a series with more points than 2× the plot width in pixels is
// thinned per pixel column to its first, lowest, highest and last point
// (so spikes stay visible). Up to 10 series get distinct colours; more
// (e.g. one curve per block of a 64-block model) run along a dark-blue →
// yellow ramp in order, and the legend lists at most 12 of them, evenly
// spaced, always the first and the last.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "bitrank/train/report.hpp"

namespace bitrank::train {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // same length
};

struct PlotOptions {
  std::string title = "loss";
  std::string x_label = "step";
  std::string y_label = "loss";
  bool log_y = false;
  int width = 800, height = 480;  // ≥ 320 × 240
};

// The SVG text. Error when a series' x and y differ in length, the size is
// below 320×240, or no series has a drawable point.
std::string plot_svg(std::span<const PlotSeries> series, const PlotOptions& options = {});
// plot_svg written to `path` (Error naming the path when it cannot be written).
void write_plot_svg(const std::filesystem::path& path, std::span<const PlotSeries> series,
                    const PlotOptions& options = {});

// From a step log: "loss" over the steps that were not skipped, and with
// per_block one series "block i" per entry of block_loss (a record without
// block i's entry adds no point to it).
std::vector<PlotSeries> loss_series(std::span<const StepRecord> records, bool per_block = false);

}  // namespace bitrank::train
