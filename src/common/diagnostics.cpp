// DiagnosticEngine: collects user-facing diagnostics and prints them with the
// offending source line and a caret line under the range, clang style.
#include "lumen/common/diagnostics.h"

#include <algorithm>
#include <ostream>

namespace lumen {

SourceRange merge(const SourceRange& a, const SourceRange& b) {
  auto before = [](const SourceLoc& x, const SourceLoc& y) {
    return x.line < y.line || (x.line == y.line && x.col < y.col);
  };
  SourceRange r = a;
  if (before(b.begin, r.begin)) r.begin = b.begin;
  if (before(r.end, b.end)) r.end = b.end;
  return r;
}

const char* to_string(Severity s) {
  switch (s) {
    case Severity::Error: return "error";
    case Severity::Warning: return "warning";
    case Severity::Note: return "note";
  }
  return "error";
}

void DiagnosticEngine::add_source(std::string file, std::string text) {
  Source source;
  source.text = std::move(text);
  source.line_starts.push_back(0);
  for (size_t i = 0; i < source.text.size(); ++i) {
    if (source.text[i] == '\n') source.line_starts.push_back(i + 1);
  }
  sources_[std::move(file)] = std::move(source);
}

void DiagnosticEngine::report(Diagnostic d) {
  if (d.severity == Severity::Error) ++error_count_;
  if (d.severity == Severity::Warning) ++warning_count_;
  diagnostics_.push_back(std::move(d));
}

void DiagnosticEngine::error(const SourceRange& range, std::string message) {
  report({Severity::Error, range, std::move(message)});
}

void DiagnosticEngine::warning(const SourceRange& range, std::string message) {
  report({Severity::Warning, range, std::move(message)});
}

void DiagnosticEngine::note(const SourceRange& range, std::string message) {
  report({Severity::Note, range, std::move(message)});
}

std::string_view DiagnosticEngine::source_line(const std::string& file, int line) const {
  auto it = sources_.find(file);
  if (it == sources_.end() || line < 1) return {};
  const Source& source = it->second;
  if (static_cast<size_t>(line) > source.line_starts.size()) return {};
  std::string_view text = source.text;
  size_t pos = source.line_starts[static_cast<size_t>(line) - 1];
  size_t end = text.find('\n', pos);
  std::string_view result = text.substr(pos, end == std::string_view::npos ? text.size() - pos : end - pos);
  if (!result.empty() && result.back() == '\r') result.remove_suffix(1);
  return result;
}

std::string DiagnosticEngine::format(const Diagnostic& d) const {
  std::string out;
  const SourceRange& r = d.range;
  if (!r.file.empty()) out += r.file + ":";
  if (r.begin.line > 0) out += std::to_string(r.begin.line) + ":" + std::to_string(r.begin.col) + ":";
  if (!out.empty()) out += " ";
  out += to_string(d.severity);
  out += ": " + d.message + "\n";
  if (r.begin.line < 1) return out;

  std::string_view line = source_line(r.file, r.begin.line);
  if (line.empty() && r.begin.col > 1) return out;
  out += std::string(line) + "\n";
  // The caret line copies tabs from the source so that it stays aligned.
  size_t begin = static_cast<size_t>(std::max(r.begin.col, 1) - 1);
  size_t end = r.end.line == r.begin.line ? static_cast<size_t>(std::max(r.end.col, 1) - 1) : line.size();
  begin = std::min(begin, line.size());
  end = std::clamp(end, begin + 1, std::max(line.size(), begin + 1));
  std::string caret;
  for (size_t i = 0; i < begin; ++i) caret += line[i] == '\t' ? '\t' : ' ';
  caret += '^';
  caret.append(end - begin - 1, '~');
  out += caret + "\n";
  return out;
}

std::string DiagnosticEngine::format() const {
  std::string out;
  for (const Diagnostic& d : diagnostics_) out += format(d);
  return out;
}

void DiagnosticEngine::print(std::ostream& out) const { out << format(); }

}  // namespace lumen
