// Checks and analyses jinja2 makes when it compiles a template: assignments
// to `loop` inside a for statement, the implicit caller/varargs/kwargs a macro
// uses, and unknown filter and test names outside "soft" (if) frames.
#include <algorithm>
#include <set>

#include "base/error.h"
#include "jinja/eval.h"

namespace hubzoo::jinja {
namespace {

// Names a for target, set target or with target assigns, recursively.
void stored_names(const Node& target, std::vector<const Node*>& out) {
  if (target.type == N::Name) out.push_back(&target);
  if (target.type == N::TupleLit) {
    for (const auto& k : target.kids) stored_names(*k, out);
  }
}

// jinja2 refuses any assignment to `loop` inside a for statement.
const Node* assigns_loop(const Node& n) {
  std::vector<const Node*> stores;
  if ((n.type == N::For || n.type == N::Set) && n.kids[0]) stored_names(*n.kids[0], stores);
  for (const Node* s : stores) {
    if (s->name == "loop") return s;
  }
  if (n.type == N::With && std::count(n.names.begin(), n.names.end(), "loop")) return &n;
  for (const Body* b : {&n.body, &n.else_body}) {
    for (const auto& k : *b) {
      if (const Node* hit = assigns_loop(*k)) return hit;
    }
  }
  return nullptr;
}

// jinja2's find_undeclared(body, names): a name counts when it is read before
// anything in the body assigns it.
void find_undeclared(const Node& n, std::set<std::string>& names, std::set<std::string>& found) {
  auto discard = [&](const Node& target) {
    std::vector<const Node*> stores;
    stored_names(target, stores);
    for (const Node* s : stores) names.erase(s->name);
  };
  if (n.type == N::Name) {
    if (names.count(n.name)) found.insert(n.name);
    return;
  }
  size_t first_kid = 0;
  if ((n.type == N::For || n.type == N::Set) && n.kids[0]) {
    discard(*n.kids[0]);
    first_kid = 1;
  }
  if (n.type == N::Macro) {
    for (const auto& p : n.names) names.erase(p);
  }
  for (size_t k = first_kid; k < n.kids.size(); ++k) {
    if (n.kids[k]) find_undeclared(*n.kids[k], names, found);
  }
  for (const auto& kv : n.kwargs) find_undeclared(*kv.second, names, found);
  if (n.dyn_args) find_undeclared(*n.dyn_args, names, found);
  if (n.dyn_kwargs) find_undeclared(*n.dyn_kwargs, names, found);
  if (n.type == N::With || n.type == N::CallBlock) {
    for (const auto& p : n.names) names.erase(p);
  }
  for (const auto& b : n.body) find_undeclared(*b, names, found);
  for (const auto& b : n.else_body) find_undeclared(*b, names, found);
}

// jinja2 resolves filter and test names when compiling, so an unknown one is
// a template error even where it never runs; only inside an `if` statement or
// an inline if-expression (a "soft" frame) does the check wait until it runs.
// Loops, macros, call, filter, with and set blocks open frames that are not soft.
bool opens_frame(N type) {
  return type == N::For || type == N::Macro || type == N::CallBlock || type == N::FilterBlock ||
         type == N::With || type == N::Set || type == N::Generation;
}

// Whether kids[k] of a frame-opening node is evaluated in the enclosing frame:
// a loop's iterable, a call block's call, with values, a set's value.
bool in_enclosing_frame(const Node& n, size_t k) {
  if (!opens_frame(n.type)) return true;
  return (n.type == N::For && k == 1) || (n.type == N::CallBlock && k == 0) || n.type == N::With ||
         (n.type == N::Set && k == 1);
}

void check_names(const Body& body, bool soft);
void check_node(const Node* n, bool soft) {
  if (!n) return;
  const char* kind = n->type == N::Filter ? "filter" : n->type == N::Test ? "test" : nullptr;
  if (kind && !soft && !(n->type == N::Filter ? has_filter(n->name) : has_test(n->name))) {
    throw FormatError("chat template syntax error at line " + std::to_string(n->line) + ": no " +
                      kind + " named '" + n->name + "'");
  }
  const bool here = soft || n->type == N::If || n->type == N::CondExpr;
  for (size_t k = 0; k < n->kids.size(); ++k) {
    check_node(n->kids[k].get(), in_enclosing_frame(*n, k) && here);
  }
  for (const auto& kv : n->kwargs) check_node(kv.second.get(), here);
  check_node(n->dyn_args.get(), here);
  check_node(n->dyn_kwargs.get(), here);
  check_names(n->body, !opens_frame(n->type) && here);
  check_names(n->else_body, !opens_frame(n->type) && here);
}
void check_names(const Body& body, bool soft) {
  for (const auto& n : body) check_node(n.get(), soft);
}

}  // namespace

const Node* find_loop_assignment(const Node& for_node) { return assigns_loop(for_node); }

std::set<std::string> undeclared_names(const Body& body, std::set<std::string> names) {
  std::set<std::string> found;
  for (const auto& b : body) find_undeclared(*b, names, found);
  return found;
}

MacroUses implicit_macro_uses(const Body& body) {
  std::set<std::string> found = undeclared_names(body, {"caller", "kwargs", "varargs"});
  return MacroUses{found.count("caller") > 0, found.count("varargs") > 0,
                   found.count("kwargs") > 0};
}

void check_filter_and_test_names(const Body& body) { check_names(body, false); }

}  // namespace hubzoo::jinja
