// Chrome trace JSON of a run (Trace Event Format, "X" complete events, microseconds): one
// process per rank, one thread per stream. Written as a stream so 512-rank runs stay cheap.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>

#include "tide/core/error.hpp"
#include "tide/exec/reference_executor.hpp"

namespace tide::exec {
namespace {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  for (const char ch : text) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(ch));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

}  // namespace

void write_chrome_trace(std::ostream& out, const program::Program& program, const RunResult& result,
                        int max_ranks) {
  const int ranks = max_ranks < 0 ? program.ranks : std::min(program.ranks, max_ranks);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  for (int r = 0; r < ranks; ++r) {
    sep();
    out << R"({"ph":"M","name":"process_name","pid":)" << r << R"(,"args":{"name":"rank )" << r
        << "\"}}";
    for (std::size_t s = 0; s < program.stream_names.size(); ++s) {
      sep();
      out << R"({"ph":"M","name":"thread_name","pid":)" << r << ",\"tid\":" << s
          << R"(,"args":{"name":")" << escape(program.stream_names[s]) << "\"}}";
    }
  }
  for (std::size_t i = 0; i < result.op_times.size() && i < program.ops.size(); ++i) {
    const OpTime& t = result.op_times[i];
    const program::Op& op = program.ops[i];
    if (t.end_us < 0 || op.rank >= ranks) continue;
    sep();
    out << R"({"ph":"X","name":")" << escape(op.label) << R"(","cat":")"
        << program::op_kind_name(op.kind()) << R"(","pid":)" << op.rank << ",\"tid\":" << op.stream
        << ",\"ts\":" << number(t.start_us) << ",\"dur\":" << number(t.end_us - t.start_us)
        << ",\"args\":{\"op\":" << i;
    if (const int ctas = program::ctas_of(op); ctas > 0) out << ",\"ctas\":" << ctas;
    out << "}}";
  }
  out << "]}\n";
}

void write_chrome_trace_file(const std::string& path, const program::Program& program,
                             const RunResult& result, int max_ranks) {
  std::ofstream out(path);
  if (!out) throw InvalidArgument("cannot write trace file '" + path + "'");
  write_chrome_trace(out, program, result, max_ranks);
  if (!out) throw InvalidArgument("writing trace file '" + path + "' failed");
}

}  // namespace tide::exec
