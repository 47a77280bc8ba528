// The parsed form of a chat template (internal to lumen_text): expression and
// statement trees with source positions, built by chat_template_parse.cpp and
// run by chat_template.cpp.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/text/chat_template.h"

namespace lumen::chat {

struct Pos {
  int line = 1, column = 1;
};

[[noreturn]] inline void fail_at(Pos pos, const std::string& message) {
  throw TemplateError(pos.line, pos.column, message);
}

enum class ExprKind {
  Literal,    // str_value / int / float / bool / none by literal_kind
  Name,       // name
  List,       // children
  Tuple,      // children
  Dict,       // children: key, value, key, value, ...
  GetAttr,    // children[0] . name
  GetItem,    // children[0] [ children[1] ]
  Slice,      // children: start, stop, step (null Expr = omitted)
  Call,       // children[0] ( args )
  Filter,     // name, children[0] = operand (may be null in filter blocks), args
  Test,       // name, children[0] = operand, args; negated
  Unary,      // op, children[0]
  Binary,     // op, children[0], children[1]
  Compare,    // children[0], then ops[i] with children[i+1]
  And,
  Or,
  Not,
  CondExpr,   // children: then, cond, else (null = undefined)
  Concat,     // children
};

enum class LiteralKind { None, Bool, Int, Float, String };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  std::string keyword;  // empty = positional
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  Pos pos;
  std::string name;  // names, attributes, filters, tests, operators
  LiteralKind literal_kind = LiteralKind::None;
  std::string str_value;
  int64_t int_value = 0;
  double float_value = 0;
  bool negated = false;
  std::vector<ExprPtr> children;
  std::vector<std::string> ops;  // Compare
  std::vector<Arg> args;         // Call / Filter / Test
};

enum class NodeKind {
  Text,      // text
  Output,    // expr
  If,        // branches: (cond, body)...; else_body
  For,       // targets, expr (iterable), filter, body, else_body
  Set,       // targets (names or attr) = expr, or block body (expr null)
  Macro,     // name, params, body
  CallBlock, // call expr, params (caller's), body
  FilterBlock,  // filter chain expr (Filter with null operand), body
  With,      // assignments, body
  Break,
  Continue,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Node {
  NodeKind kind;
  Pos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<ExprPtr> targets;  // Set / For targets (Name, GetAttr, Tuple)
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::string name;
  std::vector<Param> params;
  std::vector<std::pair<std::string, ExprPtr>> assignments;  // With
};

struct ChatTemplate::Program {
  Body body;
};

// Parses a template source as jinja2 does with trim_blocks and lstrip_blocks
// (keep_trailing_newline off). Throws TemplateError.
std::unique_ptr<ChatTemplate::Program> parse_template(std::string_view source);

}  // namespace lumen::chat
