// Jinja2 parser: tokens -> a tree of statements and expressions. One generic
// Node type keeps the tree small; `type` says which fields are used.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jinja/lexer.h"
#include "jinja/value.h"

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
  Call,      // kids[0](kids[1..], kwargs, *dyn_args, **dyn_kwargs)
  Filter,    // name; kids[0] = input (null inside a filter block), kids[1..] args, kwargs
  Test,      // name; negated; kids[0] = input, kids[1..] args, kwargs
  NsRef,     // name = namespace variable, attr
  // statements
  Text,         // name = literal text
  Output,       // kids[0]
  If,           // kids[0] = cond; body; else_body (elif = nested If)
  For,          // kids[0] = target, kids[1] = iterable, kids[2] = filter (may be null); body;
                // else_body; recursive
  Set,          // kids[0] = target, kids[1] = value (or null: block set, body; kids[2] = filter)
  Macro,        // name, names = params, kids = defaults (null where none), body; implicit
  CallBlock,    // kids[0] = Call expr, names = caller params, kids[1..] = defaults; body; implicit
  FilterBlock,  // kids[0] = filter chain with null innermost input; body
  With,         // names = targets, kids = values; body
  Break,
  Continue,
  Generation,  // transformers' {% generation %}: renders its body
};

// The implicit parameters a macro (or call block) body uses, as jinja2 decides
// them at compile time: referencing `caller`, `varargs` or `kwargs` makes the
// macro accept a caller, extra positional or extra keyword arguments.
struct MacroUses {
  bool caller = false;
  bool varargs = false;
  bool kwargs = false;
};

struct Node {
  N type;
  int line = 0;
  std::string name;
  std::string attr;
  bool negated = false;
  bool recursive = false;
  bool uses_loop = false;  // a for body reads `loop` (else jinja2 binds none)
  MacroUses uses;
  Value value;
  std::vector<NodePtr> kids;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  NodePtr dyn_args, dyn_kwargs;  // `*expr`, `**expr` in a call's arguments
  std::vector<std::string> names;
  Body body, else_body;
};

struct ParseOptions {
  int max_nesting = 256;  // expression/statement nesting; bounds the parser's recursion
};

// Throws hubzoo::FormatError ("... at line N: ...") on a malformed template.
Body parse(const std::vector<Token>& tokens, const ParseOptions& options = {});

// jinja2's compile-time analyses (jinja_analysis.cc).
// The first assignment to `loop` inside a for statement (jinja2 refuses it), or null.
const Node* find_loop_assignment(const Node& for_node);
// The `names` a body reads before assigning them (jinja2's find_undeclared).
std::set<std::string> undeclared_names(const Body& body, std::set<std::string> names);
// Which of caller/varargs/kwargs a macro body reads before assigning them.
MacroUses implicit_macro_uses(const Body& body);
// Throws FormatError for an unknown filter or test outside an if statement or
// inline if, where jinja2 resolves names at compile time.
void check_filter_and_test_names(const Body& body);

}  // namespace hubzoo::jinja
