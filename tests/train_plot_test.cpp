// SVG loss curves: the text is well-formed XML (checked by a small parser
// here), every point is drawn where the axes say (positions read back from
// the polylines and checked against each other and the tick labels), NaN
// breaks a line, log scale spaces equal ratios equally, names are escaped,
// long series are thinned keeping spikes, and the step log's series.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>

#include "bitrank/train/plot.hpp"
#include "support/expect.hpp"

namespace bitrank::train {
namespace {

using test::expect_error;
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// Checks the XML subset the writer uses: one prolog, elements properly
// nested and closed, attributes name="value" with no raw '<' or '&' outside
// entities, text without raw '<' or stray '&'. Returns "" or the problem.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> open;
  std::size_t i = 0;
  auto entity_ok = [&](std::size_t at) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
      if (s.compare(at, std::strlen(e), e) == 0) return true;
    return false;
  };
  if (s.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", 0) != 0) return "no XML prolog";
  i = s.find('\n') + 1;
  bool root_seen = false;
  while (i < s.size()) {
    if (s[i] == '<') {
      const bool closing = s[i + 1] == '/';
      std::size_t j = i + 1 + closing;
      std::size_t name_end = j;
      while (name_end < s.size() && (std::isalnum(static_cast<unsigned char>(s[name_end])) || s[name_end] == '-')) ++name_end;
      const std::string name = s.substr(j, name_end - j);
      if (name.empty()) return fmt::format("empty tag name at {}", i);
      j = name_end;
      if (closing) {
        if (s[j] != '>') return fmt::format("bad closing tag at {}", i);
        if (open.empty() || open.back() != name) return fmt::format("</{}> closes {}", name, open.empty() ? "nothing" : open.back());
        open.pop_back();
        i = j + 1;
        continue;
      }
      if (open.empty()) {
        if (root_seen) return "two root elements";
        root_seen = true;
      }
      // Attributes.
      for (;;) {
        while (s[j] == ' ' || s[j] == '\n') ++j;
        if (s[j] == '>' || (s[j] == '/' && s[j + 1] == '>')) break;
        std::size_t a = j;
        while (std::isalnum(static_cast<unsigned char>(s[a])) || s[a] == '-' || s[a] == ':') ++a;
        if (a == j || s[a] != '=' || s[a + 1] != '"') return fmt::format("bad attribute in <{}> at {}", name, j);
        std::size_t v = a + 2;
        while (v < s.size() && s[v] != '"') {
          if (s[v] == '<') return fmt::format("raw < in an attribute of <{}>", name);
          if (s[v] == '&' && !entity_ok(v)) return fmt::format("raw & in an attribute of <{}>", name);
          ++v;
        }
        if (v >= s.size()) return "unterminated attribute";
        j = v + 1;
      }
      if (s[j] == '/') {
        i = j + 2;
      } else {
        open.push_back(name);
        i = j + 1;
      }
    } else {
      if (open.empty() && s[i] != '\n') return fmt::format("text outside the root at {}", i);
      if (s[i] == '&' && !entity_ok(i)) return fmt::format("raw & in text at {}", i);
      if (s[i] == '>') return fmt::format("raw > in text at {}", i);
      ++i;
    }
  }
  if (!open.empty()) return fmt::format("<{}> not closed", open.back());
  if (!root_seen) return "no root element";
  return "";
}

// The points of every polyline, per series title, in order.
std::map<std::string, std::vector<std::vector<std::pair<double, double>>>> polylines(const std::string& svg) {
  std::map<std::string, std::vector<std::vector<std::pair<double, double>>>> out;
  std::size_t at = 0;
  while ((at = svg.find("<title>", at)) != std::string::npos) {
    const std::size_t end = svg.find("</title>", at);
    const std::string name = svg.substr(at + 7, end - at - 7);
    const std::size_t group_end = svg.find("</g>", end);
    auto& lines = out[name];
    for (std::size_t p = svg.find("points=\"", end); p != std::string::npos && p < group_end;
         p = svg.find("points=\"", p + 1)) {
      std::istringstream in(svg.substr(p + 8, svg.find('"', p + 8) - p - 8));
      std::vector<std::pair<double, double>> pts;
      double x, y;
      char comma;
      while (in >> x >> comma >> y) pts.emplace_back(x, y);
      lines.push_back(pts);
    }
    at = end;
  }
  return out;
}

// The pixel position of each tick label, from the <text> elements.
std::map<std::string, double> x_label_positions(const std::string& svg) {
  std::map<std::string, double> out;  // label → x of the text anchor
  const std::size_t g = svg.find("<g text-anchor=\"middle\">");
  std::size_t at = g;
  const std::size_t g_end = svg.find("</g>", g);
  while ((at = svg.find("<text x=\"", at + 1)) < g_end) {
    const double x = std::stod(svg.substr(at + 9));
    const std::size_t t = svg.find('>', at) + 1;
    out[svg.substr(t, svg.find('<', t) - t)] = x;
  }
  return out;
}

std::map<std::string, double> y_label_positions(const std::string& svg) {
  std::map<std::string, double> out;  // label → y of the text baseline − 4 (the tick's y)
  const std::size_t g = svg.find("<g text-anchor=\"end\">");
  std::size_t at = g;
  const std::size_t g_end = svg.find("</g>", g);
  while ((at = svg.find("<text x=\"", at + 1)) < g_end) {
    const std::size_t ya = svg.find("y=\"", at);
    const double y = std::stod(svg.substr(ya + 3)) - 4;
    const std::size_t t = svg.find('>', at) + 1;
    out[svg.substr(t, svg.find('<', t) - t)] = y;
  }
  return out;
}

TEST(TrainPlot, WellFormedAndHoldsEveryPoint) {
  PlotSeries a{"loss", {}, {}}, b{"block <0> & \"1\"", {}, {}};
  for (int s = 0; s <= 100; s += 5) {
    a.x.push_back(s);
    a.y.push_back(1.0 + 0.01 * s);  // 1 … 2
    b.x.push_back(s);
    b.y.push_back(2.0 - 0.005 * s);
  }
  const PlotSeries both[] = {a, b};
  const std::string svg = plot_svg(both, {.title = "distill <test>"});
  EXPECT_EQ(xml_problem(svg), "") << svg;
  EXPECT_NE(svg.find("distill &lt;test&gt;"), std::string::npos);
  EXPECT_NE(svg.find("block &lt;0&gt; &amp; &quot;1&quot;"), std::string::npos);
  const auto lines = polylines(svg);
  ASSERT_EQ(lines.size(), 2u);
  const auto& pa = lines.at("loss");
  ASSERT_EQ(pa.size(), 1u);
  ASSERT_EQ(pa[0].size(), a.x.size());
  // Pixel positions agree with the tick labels: x ticks at 0, 20, …, 100 and y at 1.0, 1.2, …, 2.0.
  const auto xl = x_label_positions(svg);
  const auto yl = y_label_positions(svg);
  ASSERT_TRUE(xl.contains("0") && xl.contains("100")) << svg;
  ASSERT_TRUE(yl.contains("1.0") && yl.contains("2.0")) << svg;
  const double x0 = xl.at("0"), x100 = xl.at("100"), y1 = yl.at("1.0"), y2 = yl.at("2.0");
  for (std::size_t i = 0; i < a.x.size(); ++i) {
    EXPECT_NEAR(pa[0][i].first, x0 + (x100 - x0) * a.x[i] / 100, 0.011) << i;
    EXPECT_NEAR(pa[0][i].second, y1 + (y2 - y1) * (a.y[i] - 1.0), 0.011) << i;
  }
  const auto& pbe = lines.at("block &lt;0&gt; &amp; &quot;1&quot;");
  ASSERT_EQ(pbe.size(), 1u);
  for (std::size_t i = 0; i < b.x.size(); ++i)
    EXPECT_NEAR(pbe[0][i].second, y1 + (y2 - y1) * (b.y[i] - 1.0), 0.011) << i;
  // Legend with both names (two series).
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
}

TEST(TrainPlot, LogScaleAndGaps) {
  PlotSeries s{"loss", {0, 1, 2, 3, 4, 5, 6}, {1e-3, 1e-2, kNan, 1e-1, 1.0, -1.0, 10.0}};
  const std::string svg = plot_svg(std::span(&s, 1), {.log_y = true});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("(log scale)"), std::string::npos);
  const auto lines = polylines(svg).at("loss");
  // NaN and the negative value (not drawable on a log axis) break the line: [0,1] [3,4] [6].
  ASSERT_EQ(lines.size(), 3u);
  ASSERT_EQ(lines[0].size(), 2u);
  ASSERT_EQ(lines[1].size(), 2u);
  ASSERT_EQ(lines[2].size(), 1u);
  // Each factor of 10 is the same height, and matches the decade tick labels.
  const double d1 = lines[0][0].second - lines[0][1].second;
  const double d2 = lines[1][0].second - lines[1][1].second;
  EXPECT_GT(d1, 10);
  EXPECT_NEAR(d1, d2, 0.02);
  EXPECT_NEAR(lines[1][1].second - lines[2][0].second, d1, 0.02);
  const auto yl = y_label_positions(svg);
  for (const char* t : {"0.001", "0.01", "0.1", "1", "10"}) ASSERT_TRUE(yl.contains(t)) << t << "\n" << svg;
  EXPECT_NEAR(yl.at("0.001"), lines[0][0].second, 0.011);
  EXPECT_NEAR(yl.at("10"), lines[2][0].second, 0.011);
  EXPECT_FALSE(yl.contains("2"));  // 4 decades: powers of ten only
}

TEST(TrainPlot, ThinsLongSeriesKeepingSpikes) {
  PlotSeries s{"loss", {}, {}};
  for (int i = 0; i < 100000; ++i) {
    s.x.push_back(i);
    s.y.push_back(i == 54321 ? 50.0 : 1.0 + 1.0 / (1 + i));
  }
  const std::string svg = plot_svg(std::span(&s, 1));
  EXPECT_EQ(xml_problem(svg), "");
  const auto lines = polylines(svg).at("loss");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_LE(lines[0].size(), 4u * 800);
  EXPECT_GE(lines[0].size(), 700u);
  double top = 1e9;
  for (const auto& p : lines[0]) top = std::min(top, p.second);
  const auto yl = y_label_positions(svg);
  ASSERT_TRUE(yl.contains("50")) << svg.substr(0, 3000);
  EXPECT_NEAR(top, yl.at("50"), 0.011);  // the spike is still drawn
  EXPECT_LT(svg.size(), 200000u);
}

TEST(TrainPlot, ManySeriesAndLegend) {
  std::vector<PlotSeries> blocks;
  for (int b = 0; b < 30; ++b) blocks.push_back({fmt::format("block {}", b), {0, 1, 2}, {1.0 + b, 0.5 + b, 0.25 + b}});
  const std::string svg = plot_svg(blocks);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polylines(svg).size(), 30u);
  EXPECT_NE(svg.find(">block 0</text>"), std::string::npos);
  EXPECT_NE(svg.find(">block 29</text>"), std::string::npos);
  EXPECT_NE(svg.find(">(30 series)</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke=\"#440154\""), std::string::npos);  // the ramp's ends
  EXPECT_NE(svg.find("stroke=\"#fde725\""), std::string::npos);
}

TEST(TrainPlot, SeriesFromStepLog) {
  std::vector<StepRecord> r;
  for (int s = 0; s < 5; ++s) r.push_back({.step = s, .loss = 1.0 / (s + 1), .skipped = s == 2, .block_loss = {0.1 * s, 0.2 * s}});
  const auto one = loss_series(r);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].x, (std::vector<double>{0, 1, 3, 4}));  // the skipped step is left out
  EXPECT_EQ(one[0].y, (std::vector<double>{1.0, 0.5, 0.25, 0.2}));
  const auto per = loss_series(r, true);
  ASSERT_EQ(per.size(), 3u);
  EXPECT_EQ(per[2].name, "block 1");
  EXPECT_EQ(per[2].y, (std::vector<double>{0.0, 0.2, 0.6000000000000001, 0.8}));
}

TEST(TrainPlot, RejectsBadInput) {
  PlotSeries s{"x", {1, 2}, {1}};
  expect_error([&] { plot_svg(std::span(&s, 1)); }, "series \"x\" has 2 x values but 1 y values");
  PlotSeries z{"z", {1, 2}, {0, -1}};
  expect_error([&] { plot_svg(std::span(&z, 1), {.title = "t", .log_y = true}); }, "\"t\" has no drawable point (finite and > 0)");
  expect_error([&] { plot_svg(std::span(&z, 1), {.width = 100}); }, "size 100×480 is below 320×240");
  const std::vector<PlotSeries> none;
  expect_error([&] { plot_svg(none); }, "no drawable point");
  // One point: a usable (widened) range.
  PlotSeries one{"one", {3}, {2.5}};
  const std::string svg = plot_svg(std::span(&one, 1));
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(polylines(svg).at("one")[0].size(), 1u);
  expect_error([&] { write_plot_svg("/nonexistent-dir/x.svg", std::span(&one, 1)); }, "plot: cannot write /nonexistent-dir/x.svg");
}

}  // namespace
}  // namespace bitrank::train
