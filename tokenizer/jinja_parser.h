// Jinja2 parser: tokens -> a tree of statements and expressions. One generic
// Node type keeps the tree small; `type` says which fields are used.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_value.h"

namespace hubzoo::jinja {

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class N {
  // expressions
  Literal,   // value
  Name,      // name
  ListLit,   // kids
  TupleLit,  // kids
  DictLit,   // kids = k0, v0, k1, v1, ...
  Unary,     // name = "-", "+", "not"; kids[0]
  Binary,    // name = op (+ - * / // % ** ~ and or); kids[0..1]
  Compare,   // kids = operands, names = ops (== != < > <= >= in notin)
  CondExpr,  // kids = then, cond, else (else may be null)
  GetAttr,   // kids[0].name
  GetItem,   // kids[0][kids[1]]
  Slice,     // kids = start, stop, step (each may be null)
  Call,      // kids[0](kids[1..], kwargs)
  Filter,    // name; kids[0] = input (null inside a filter block), kids[1..] args, kwargs
  Test,      // name; negated; kids[0] = input, kids[1..] args
  NsRef,     // name = namespace variable, attr
  // statements
  Text,    // name = literal text
  Output,  // kids[0]
  If,      // kids[0] = cond; body; else_body (elif = nested If)
  For,     // kids[0] = target, kids[1] = iterable, kids[2] = filter (may be null); body; else_body
  Set,     // kids[0] = target, kids[1] = value (or null: block set, body; kids[2] = filter)
  Macro,   // name, names = params, kids = defaults (null where none), body
  CallBlock,    // kids[0] = Call expr, names = caller params, kids[1..] = defaults; body
  FilterBlock,  // kids[0] = filter chain with null innermost input; body
  With,         // names = targets, kids = values; body
  Break,
  Continue,
  Generation,  // transformers' {% generation %}: renders its body
};

struct Node {
  N type;
  int line = 0;
  std::string name;
  std::string attr;
  bool negated = false;
  Value value;
  std::vector<NodePtr> kids;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  std::vector<std::string> names;
  Body body, else_body;
};

struct ParseOptions {
  int max_nesting = 256;  // expression/statement nesting; bounds the parser's recursion
};

// Throws hubzoo::FormatError ("... at line N: ...") on a malformed template.
Body parse(const std::vector<Token>& tokens, const ParseOptions& options = {});

}  // namespace hubzoo::jinja
