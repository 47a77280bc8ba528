// The DSL lexer: token kinds, values, ranges, line starts, and the errors it
// reports for bad characters, numbers, strings and escapes.
#include "lumen/dsl/lexer.h"

#include <gtest/gtest.h>

namespace lumen::dsl {
namespace {

std::vector<Token> lex_ok(std::string_view text) {
  DiagnosticEngine d;
  std::vector<Token> tokens = lex("t.dsl", text, d);
  EXPECT_EQ(d.format(), "");
  return tokens;
}

std::vector<TokenKind> kinds(const std::vector<Token>& tokens) {
  std::vector<TokenKind> out;
  for (const Token& t : tokens) out.push_back(t.kind);
  return out;
}

TEST(Lexer, EmptyInputIsJustEnd) {
  auto t = lex_ok("");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].kind, TokenKind::End);
}

TEST(Lexer, PunctuationAndOperators) {
  using K = TokenKind;
  auto t = lex_ok("( ) [ ] { } , : = -> + - * / % == != < <= > >= && || !");
  EXPECT_EQ(kinds(t), (std::vector<K>{K::LParen, K::RParen, K::LBracket, K::RBracket, K::LBrace, K::RBrace, K::Comma,
                                      K::Colon, K::Assign, K::Arrow, K::Plus, K::Minus, K::Star, K::Slash, K::Percent,
                                      K::EqEq, K::NotEq, K::Less, K::LessEq, K::Greater, K::GreaterEq, K::AndAnd,
                                      K::OrOr, K::Not, K::End}));
}

TEST(Lexer, IdentifiersNumbersAndRanges) {
  auto t = lex_ok("q8_0 n_embd 896 1e-6 10000.0 .5 2.");
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(t[0].kind, TokenKind::Identifier);
  EXPECT_EQ(t[0].text, "q8_0");
  EXPECT_EQ(t[1].text, "n_embd");
  EXPECT_EQ(t[1].range.begin, (SourceLoc{1, 6}));
  EXPECT_EQ(t[1].range.end, (SourceLoc{1, 12}));
  EXPECT_EQ(t[2].kind, TokenKind::Int);
  EXPECT_EQ(t[2].int_value, 896);
  EXPECT_EQ(t[3].kind, TokenKind::Float);
  EXPECT_DOUBLE_EQ(t[3].float_value, 1e-6);
  EXPECT_EQ(t[4].kind, TokenKind::Float);
  EXPECT_DOUBLE_EQ(t[4].float_value, 10000.0);
  EXPECT_DOUBLE_EQ(t[5].float_value, 0.5);
  EXPECT_EQ(t[6].kind, TokenKind::Float);
  EXPECT_DOUBLE_EQ(t[6].float_value, 2.0);
}

TEST(Lexer, CommentsAndLineStarts) {
  auto t = lex_ok("model x   # a comment ( \" $\n  let y = 1 # another\n#only comment\nz");
  ASSERT_EQ(t.size(), 8u);
  EXPECT_TRUE(t[0].at_line_start);   // model
  EXPECT_FALSE(t[1].at_line_start);  // x
  EXPECT_TRUE(t[2].at_line_start);   // let
  EXPECT_EQ(t[2].range.begin, (SourceLoc{2, 3}));
  EXPECT_FALSE(t[5].at_line_start);  // 1
  EXPECT_TRUE(t[6].at_line_start);   // z
  EXPECT_EQ(t[6].range.begin, (SourceLoc{4, 1}));
}

TEST(Lexer, StringsDecodeEscapes) {
  auto t = lex_ok(R"("blk.{i}.attn_q.weight" "a\"b\\c\td\n")");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].kind, TokenKind::String);
  EXPECT_EQ(t[0].text, "blk.{i}.attn_q.weight");
  EXPECT_EQ(t[0].range.end, (SourceLoc{1, 24}));
  EXPECT_EQ(t[1].text, "a\"b\\c\td\n");
}

TEST(Lexer, BadCharacterIsOneErrorPerCharacter) {
  DiagnosticEngine d;
  auto t = lex("t.dsl", "a $ \xc3\xa9 b \x01", d);
  EXPECT_EQ(kinds(t), (std::vector<TokenKind>{TokenKind::Identifier, TokenKind::Error, TokenKind::Error,
                                              TokenKind::Identifier, TokenKind::Error, TokenKind::End}));
  ASSERT_EQ(d.error_count(), 3);
  EXPECT_EQ(d.diagnostics()[0].message, "unexpected character '$'");
  EXPECT_EQ(d.diagnostics()[1].message, "unexpected character byte 0xc3");
  EXPECT_EQ(d.diagnostics()[2].message, "unexpected character byte 0x01");
}

TEST(Lexer, UnterminatedStringStopsAtEndOfLine) {
  DiagnosticEngine d;
  d.add_source("t.dsl", "x = \"abc\ny");
  auto t = lex("t.dsl", "x = \"abc\ny", d);
  ASSERT_EQ(d.error_count(), 1);
  EXPECT_EQ(d.format(), "t.dsl:1:5: error: unterminated string\nx = \"abc\n    ^\n");
  EXPECT_EQ(t.back().kind, TokenKind::End);
  EXPECT_EQ(t[t.size() - 2].text, "y");  // lexing goes on on the next line
}

TEST(Lexer, BadEscapeAndBadNumbers) {
  DiagnosticEngine d;
  lex("t.dsl", "\"a\\qb\" 12ab 99999999999999999999 1e999", d);
  ASSERT_EQ(d.error_count(), 4);
  EXPECT_EQ(d.diagnostics()[0].message, "invalid escape sequence '\\q' in string");
  EXPECT_EQ(d.diagnostics()[0].range.begin, (SourceLoc{1, 3}));
  EXPECT_EQ(d.diagnostics()[1].message, "invalid number '12ab'");
  EXPECT_EQ(d.diagnostics()[2].message, "integer literal '99999999999999999999' is too large");
  EXPECT_EQ(d.diagnostics()[3].message, "float literal '1e999' is out of range");
}

TEST(Lexer, TrailingBackslashInString) {
  DiagnosticEngine d;
  auto t = lex("t.dsl", "\"abc\\", d);
  ASSERT_EQ(d.error_count(), 1);
  EXPECT_EQ(d.diagnostics()[0].message, "unterminated string");
  EXPECT_EQ(t.back().kind, TokenKind::End);
}

}  // namespace
}  // namespace lumen::dsl
