// DiagnosticEngine: counting and the clang-style printed form (location,
// message, source line, caret line under the range).
#include "lumen/common/diagnostics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace lumen {
namespace {

TEST(Diagnostics, FormatsLocationSourceLineAndCaret) {
  DiagnosticEngine d;
  d.add_source("a.dsl", "model x\nlet y = foo + 1\n");
  d.error({"a.dsl", {2, 9}, {2, 12}}, "unknown name 'foo'");
  EXPECT_EQ(d.format(), "a.dsl:2:9: error: unknown name 'foo'\nlet y = foo + 1\n        ^~~\n");
  EXPECT_EQ(d.error_count(), 1);
  EXPECT_TRUE(d.has_errors());
}

TEST(Diagnostics, EmptyRangeGetsOneCaret) {
  DiagnosticEngine d;
  d.add_source("a.dsl", "let a = 2 *\n");
  d.error({"a.dsl", {1, 12}, {1, 12}}, "expected an expression");
  EXPECT_EQ(d.format(), "a.dsl:1:12: error: expected an expression\nlet a = 2 *\n           ^\n");
}

TEST(Diagnostics, CaretLineKeepsTabsAligned) {
  DiagnosticEngine d;
  d.add_source("t.dsl", "\tx = y\r\n");
  d.warning({"t.dsl", {1, 6}, {1, 7}}, "w");
  EXPECT_EQ(d.format(), "t.dsl:1:6: warning: w\n\tx = y\n\t    ^\n");
  EXPECT_EQ(d.warning_count(), 1);
  EXPECT_FALSE(d.has_errors());
}

TEST(Diagnostics, MultiLineRangeUnderlinesToEndOfLine) {
  DiagnosticEngine d;
  d.add_source("m.dsl", "abc def\nghi\n");
  d.note({"m.dsl", {1, 5}, {2, 2}}, "here");
  EXPECT_EQ(d.format(), "m.dsl:1:5: note: here\nabc def\n    ^~~\n");
}

TEST(Diagnostics, WithoutLocationOrSource) {
  DiagnosticEngine d;
  d.error({"missing.dsl", {}, {}}, "cannot open file");
  d.error({}, "no file at all");
  d.error({"nosource.dsl", {3, 1}, {3, 2}}, "no text registered");
  EXPECT_EQ(d.format(),
            "missing.dsl: error: cannot open file\n"
            "error: no file at all\n"
            "nosource.dsl:3:1: error: no text registered\n\n^\n");
  std::ostringstream out;
  d.print(out);
  EXPECT_EQ(out.str(), d.format());
  EXPECT_EQ(d.error_count(), 3);
  ASSERT_EQ(d.diagnostics().size(), 3u);
  EXPECT_EQ(d.diagnostics()[0].message, "cannot open file");
}

TEST(Diagnostics, RangePastEndOfLineIsClamped) {
  DiagnosticEngine d;
  d.add_source("c.dsl", "ab\n");
  d.error({"c.dsl", {1, 40}, {1, 50}}, "far");
  EXPECT_EQ(d.format(), "c.dsl:1:40: error: far\nab\n  ^\n");
}

TEST(Diagnostics, MergeCoversBothRanges) {
  SourceRange a{"f", {2, 5}, {2, 8}};
  SourceRange b{"f", {1, 3}, {1, 4}};
  SourceRange m = merge(a, b);
  EXPECT_EQ(m.begin, (SourceLoc{1, 3}));
  EXPECT_EQ(m.end, (SourceLoc{2, 8}));
}

}  // namespace
}  // namespace lumen
