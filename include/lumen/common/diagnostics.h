// Diagnostics for user mistakes (in .dsl programs, and semantic errors the
// lowering finds): collected with their source ranges, then printed the way
// clang prints them:
//
//   qwen2.dsl:12:7: error: unknown name 'n_emb'
//     h = rms_norm(x, attn_norm[l], n_emb)
//                                   ^~~~~
//
// Compiler bugs are not diagnostics; they are assertions.
#pragma once

#include <iosfwd>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace lumen {

// A position in a source file. Both numbers are 1-based and count bytes;
// line 0 means "no position" (the diagnostic is about the whole file).
struct SourceLoc {
  int line = 0;
  int col = 0;
  friend bool operator==(const SourceLoc&, const SourceLoc&) = default;
};

// [begin, end) in `file`: `end` is the position just past the last character.
// An empty range (begin == end) still gets one caret.
struct SourceRange {
  std::string file;
  SourceLoc begin;
  SourceLoc end;
};

// The range covering both `a` and `b` (which must be in the same file).
SourceRange merge(const SourceRange& a, const SourceRange& b);

enum class Severity { Error, Warning, Note };
const char* to_string(Severity s);  // "error", "warning", "note"

struct Diagnostic {
  Severity severity = Severity::Error;
  SourceRange range;
  std::string message;  // one line, lower case start, no trailing period
};

// Collects diagnostics in the order they are reported. Register the text of
// each file with add_source() so that the printed form can show the source
// line and a caret under the range.
class DiagnosticEngine {
 public:
  void add_source(std::string file, std::string text);

  void report(Diagnostic d);
  void error(const SourceRange& range, std::string message);
  void warning(const SourceRange& range, std::string message);
  void note(const SourceRange& range, std::string message);

  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }
  int error_count() const { return error_count_; }
  int warning_count() const { return warning_count_; }
  bool has_errors() const { return error_count_ > 0; }

  // `file:line:col: error: message`, then the source line and the caret line
  // (each line ends with '\n'). Without a known line: `file: error: message`.
  std::string format(const Diagnostic& d) const;
  // All diagnostics, in order.
  std::string format() const;
  void print(std::ostream& out) const;

 private:
  std::string_view source_line(const std::string& file, int line) const;

  struct Source {
    std::string text;
    std::vector<size_t> line_starts;  // byte offset of each line, so lookups stay O(1)
  };
  std::map<std::string, Source, std::less<>> sources_;
  std::vector<Diagnostic> diagnostics_;
  int error_count_ = 0;
  int warning_count_ = 0;
};

}  // namespace lumen
