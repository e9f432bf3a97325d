// A timeline picture of a run as SVG: lanes per (rank, stream), boxes per op coloured by
// kind, a millisecond axis and a legend. Lanes of streams that ran nothing are left out.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/exec/reference_executor.hpp"

namespace tide::exec {
namespace {

constexpr program::OpKind kKinds[] = {
    program::OpKind::kCopy,      program::OpKind::kSum,     program::OpKind::kLand,
    program::OpKind::kCast,      program::OpKind::kZero,    program::OpKind::kSignal,
    program::OpKind::kWait,      program::OpKind::kRailPut, program::OpKind::kEventRecord,
    program::OpKind::kEventWait, program::OpKind::kRelease,
};

const char* colour(program::OpKind kind) {
  switch (kind) {
    case program::OpKind::kCopy:
      return "#4e79a7";
    case program::OpKind::kSum:
      return "#e15759";
    case program::OpKind::kLand:
      return "#f28e2b";
    case program::OpKind::kCast:
      return "#b07aa1";
    case program::OpKind::kZero:
      return "#9c755f";
    case program::OpKind::kSignal:
      return "#59a14f";
    case program::OpKind::kWait:
      return "#d3d3d3";
    case program::OpKind::kRailPut:
      return "#76b7b2";
    case program::OpKind::kEventRecord:
      return "#edc948";
    case program::OpKind::kEventWait:
      return "#e8e8e8";
    case program::OpKind::kRelease:
      return "#000000";
  }
  return "#888888";
}

std::string xml(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    switch (ch) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

void write_timeline_svg(std::ostream& out, const program::Program& program, const RunResult& result,
                        int max_ranks) {
  const int ranks = std::max(0, std::min(program.ranks, max_ranks));
  const int streams = static_cast<int>(program.stream_names.size());
  // Lanes that ran something.
  std::vector<int> lane(static_cast<std::size_t>(ranks * streams), -1);
  for (std::size_t i = 0; i < result.op_times.size() && i < program.ops.size(); ++i) {
    const program::Op& op = program.ops[i];
    if (op.rank < ranks && result.op_times[i].end_us >= 0)
      lane[static_cast<std::size_t>(op.rank * streams + op.stream)] = 0;
  }
  int lanes = 0;
  for (int& l : lane)
    if (l == 0) l = lanes++;

  const double label_w = 150, plot_w = 1100, lane_h = 16, top = 30;
  const double legend_y = top + lanes * lane_h + 40;
  const double height = legend_y + 30;
  const double span = std::max(result.makespan_us, 1e-3);
  auto x_of = [&](double us) { return label_w + plot_w * us / span; };

  out << R"(<svg xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="10" )"
      << "width=\"" << fmt(label_w + plot_w + 20) << "\" height=\"" << fmt(height) << "\">\n";
  out << "<text x=\"4\" y=\"14\" font-size=\"12\">predicted " << fmt(result.makespan_us / 1e3)
      << " ms, " << program.ranks << " ranks (first " << ranks << " shown)</text>\n";
  for (int r = 0; r < ranks; ++r) {
    for (int s = 0; s < streams; ++s) {
      const int l = lane[static_cast<std::size_t>(r * streams + s)];
      if (l < 0) continue;
      const double y = top + l * lane_h;
      out << "<text x=\"4\" y=\"" << fmt(y + 11) << "\">rank " << r << " "
          << xml(program.stream_names[static_cast<std::size_t>(s)]) << "</text>\n";
      out << "<line x1=\"" << fmt(label_w) << "\" x2=\"" << fmt(label_w + plot_w) << "\" y1=\""
          << fmt(y + lane_h) << "\" y2=\"" << fmt(y + lane_h) << "\" stroke=\"#eeeeee\"/>\n";
    }
  }
  for (std::size_t i = 0; i < result.op_times.size() && i < program.ops.size(); ++i) {
    const program::Op& op = program.ops[i];
    const OpTime& t = result.op_times[i];
    if (op.rank >= ranks || t.end_us < 0) continue;
    const int l = lane[static_cast<std::size_t>(op.rank * streams + op.stream)];
    const double x = x_of(t.start_us);
    const double w = std::max(0.5, x_of(t.end_us) - x);
    out << "<rect x=\"" << fmt(x) << "\" y=\"" << fmt(top + l * lane_h + 2) << "\" width=\""
        << fmt(w) << "\" height=\"" << fmt(lane_h - 4) << "\" fill=\"" << colour(op.kind())
        << "\"><title>" << xml(op.label) << " (" << fmt(t.start_us) << "-" << fmt(t.end_us)
        << " us)</title></rect>\n";
  }
  // Axis: ten ticks in milliseconds.
  const double axis_y = top + lanes * lane_h + 12;
  for (int k = 0; k <= 10; ++k) {
    const double us = span * k / 10;
    out << "<text x=\"" << fmt(x_of(us)) << "\" y=\"" << fmt(axis_y) << "\" text-anchor=\"middle\">"
        << fmt(us / 1e3) << " ms</text>\n";
  }
  double lx = label_w;
  for (const program::OpKind kind : kKinds) {
    out << "<rect x=\"" << fmt(lx) << "\" y=\"" << fmt(legend_y)
        << "\" width=\"10\" height=\"10\" fill=\"" << colour(kind) << "\" stroke=\"#999999\"/>";
    out << "<text x=\"" << fmt(lx + 14) << "\" y=\"" << fmt(legend_y + 9) << "\">"
        << program::op_kind_name(kind) << "</text>\n";
    lx += 95;
  }
  out << "</svg>\n";
}

void write_timeline_svg_file(const std::string& path, const program::Program& program,
                             const RunResult& result, int max_ranks) {
  std::ofstream out(path);
  if (!out) throw InvalidArgument("cannot write timeline file '" + path + "'");
  write_timeline_svg(out, program, result, max_ranks);
  if (!out) throw InvalidArgument("writing timeline file '" + path + "' failed");
}

}  // namespace tide::exec
