#include "jinja/parser.h"

#include <algorithm>

#include "base/error.h"

namespace hubzoo::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& toks, const ParseOptions& opt) : t_(toks), opt_(opt) {}

  Body run() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(pos_ + n, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& msg, int line = -1) const {
    throw FormatError("chat template syntax error at line " +
                      std::to_string(line < 0 ? cur().line : line) + ": " + msg);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::Eof:
        return "end of template";
      case Tok::VarEnd:
        return "'}}'";
      case Tok::BlockEnd:
        return "'%}'";
      case Tok::Name:
      case Tok::Op:
        return "'" + t.text + "'";
      case Tok::String:
        return "string";
      default:
        return "token";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd)
      fail("expected end of statement block, got " + describe(cur()));
    next();
  }
  NodePtr node(N type, int line) {
    auto n = std::make_unique<Node>();
    n->type = type;
    n->line = line;
    return n;
  }
  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser) : p(parser) {
      if (++p.depth_ > p.opt_.max_nesting) p.fail("template nested too deeply");
    }
    ~Depth() { --p.depth_; }
  };

  // ---- statements ----
  // Parses until `{% <one of ends> ...`, consuming the block-begin and the end name.
  Body parse_body(const std::vector<std::string>& ends, std::string* which) {
    Depth d(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (ends.empty()) return body;
        std::string want;
        for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
        fail("unexpected end of template, expected " + want);
      }
      if (t.type == Tok::Text) {
        auto n = node(N::Text, t.line);
        n->name = t.text;
        body.push_back(std::move(n));
        next();
      } else if (t.type == Tok::VarBegin) {
        int line = next().line;
        auto n = node(N::Output, line);
        n->kids.push_back(parse_tuple(true, {}));
        if (cur().type != Tok::VarEnd) fail("expected '}}', got " + describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (t.type == Tok::BlockBegin) {
        const Token& kw = peek();
        if (kw.type != Tok::Name) fail("expected a statement name after '{%'", kw.line);
        if (std::find(ends.begin(), ends.end(), kw.text) != ends.end()) {
          next();
          *which = next().text;
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  NodePtr parse_statement() {
    const Token& kw = next();
    const std::string& k = kw.text;
    const int line = kw.line;
    if (k == "if") return parse_if(line);
    if (k == "for") return parse_for(line);
    if (k == "set") return parse_set(line);
    if (k == "macro") return parse_macro(line);
    if (k == "call") return parse_call_block(line);
    if (k == "filter") return parse_filter_block(line);
    if (k == "with") return parse_with(line);
    if (k == "generation") {
      auto n = node(N::Generation, line);
      expect_block_end();
      std::string end;
      n->body = parse_body({"endgeneration"}, &end);
      expect_block_end();
      return n;
    }
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) fail("'" + k + "' outside of a loop", line);
      auto n = node(k == "break" ? N::Break : N::Continue, line);
      expect_block_end();
      return n;
    }
    if (k == "include" || k == "import" || k == "from" || k == "extends" || k == "block") {
      fail("'" + k + "' is not supported in chat templates (no template loading)", line);
    }
    fail("encountered unknown tag '" + k + "'", line);
  }

  NodePtr parse_if(int line) {
    auto n = node(N::If, line);
    n->kids.push_back(parse_tuple(false, {}));
    expect_block_end();
    std::string end;
    n->body = parse_body({"elif", "else", "endif"}, &end);
    if (end == "elif") {
      n->else_body.push_back(parse_if(cur().line));
      return n;  // the nested if consumed endif
    }
    if (end == "else") {
      expect_block_end();
      n->else_body = parse_body({"endif"}, &end);
    }
    expect_block_end();
    return n;
  }

  NodePtr parse_assign_target(bool names_only, const char* end_name) {
    int line = cur().line;
    auto one = [&]() -> NodePtr {
      if (!names_only && cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
        auto ns = node(N::NsRef, line);
        ns->name = next().text;
        next();
        ns->attr = expect_name();
        return ns;
      }
      auto nm = node(N::Name, line);
      nm->name = expect_name();
      return nm;
    };
    bool paren = skip_op("(");
    NodePtr first = one();
    if (!paren && !is_op(",")) return first;
    auto tup = node(N::TupleLit, line);
    tup->kids.push_back(std::move(first));
    while (skip_op(",")) {
      if (paren && is_op(")")) break;
      if (!paren && (is_name(end_name) || is_op("="))) break;
      tup->kids.push_back(one());
    }
    if (paren) expect_op(")");
    return tup;
  }

  NodePtr parse_for(int line) {
    auto n = node(N::For, line);
    n->kids.push_back(parse_assign_target(true, "in"));
    if (!skip_name("in")) fail("expected 'in' in for loop");
    n->kids.push_back(parse_tuple(false, {"recursive"}));
    n->kids.push_back(skip_name("if") ? parse_expression(true) : nullptr);
    n->recursive = skip_name("recursive");
    expect_block_end();
    std::string end;
    ++loop_depth_;
    n->body = parse_body({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      // loop_depth_ is the outer depth again: break/continue here leave an outer loop.
      n->else_body = parse_body({"endfor"}, &end);
    }
    expect_block_end();
    n->uses_loop = n->recursive || !undeclared_names(n->body, {"loop"}).empty();
    if (const Node* bad = find_loop_assignment(*n)) {
      fail("can't assign to special loop variable in for-loop target", bad->line);
    }
    return n;
  }

  NodePtr parse_set(int line) {
    auto n = node(N::Set, line);
    n->kids.push_back(parse_assign_target(false, ""));
    if (skip_op("=")) {
      n->kids.push_back(parse_tuple(true, {}));
      expect_block_end();
      return n;
    }
    n->kids.push_back(nullptr);
    n->kids.push_back(is_op("|") ? parse_filter_chain(nullptr) : nullptr);
    expect_block_end();
    std::string end;
    n->body = parse_body({"endset"}, &end);
    expect_block_end();
    return n;
  }

  void parse_signature(Node& n) {
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      if (!n.names.empty()) expect_op(",");
      std::string name = expect_name();
      if (std::count(n.names.begin(), n.names.end(), name)) {
        fail("duplicate argument '" + name + "' in macro definition");
      }
      n.names.push_back(name);
      if (skip_op("=")) {
        n.kids.push_back(parse_expression(true));
        defaults = true;
      } else if (defaults) {
        fail("non-default argument follows default argument");
      } else {
        n.kids.push_back(nullptr);
      }
    }
    expect_op(")");
  }

  // The implicit caller/varargs/kwargs a macro or call block uses.
  void set_uses(Node& n, size_t default_offset) {
    n.uses = implicit_macro_uses(n.body);
    auto explicit_param = [&](const char* p) {
      return std::find(n.names.begin(), n.names.end(), p) - n.names.begin();
    };
    size_t caller = explicit_param("caller");
    if (n.uses.caller && caller < n.names.size()) {
      if (!n.kids[caller + default_offset]) {
        fail(
            "when defining macros or call blocks the special \"caller\" argument must be "
            "omitted or be given a default",
            n.line);
      }
      n.uses.caller = false;  // the parameter itself holds it
    }
    if (explicit_param("varargs") < static_cast<ptrdiff_t>(n.names.size())) n.uses.varargs = false;
    if (explicit_param("kwargs") < static_cast<ptrdiff_t>(n.names.size())) n.uses.kwargs = false;
  }

  NodePtr parse_macro(int line) {
    auto n = node(N::Macro, line);
    n->name = expect_name();
    parse_signature(*n);
    expect_block_end();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_body({"endmacro"}, &end);
    loop_depth_ = saved;
    if (cur().type == Tok::Name) next();  // `{% endmacro name %}`
    expect_block_end();
    set_uses(*n, 0);
    return n;
  }

  NodePtr parse_call_block(int line) {
    auto sig = node(N::Macro, line);
    if (is_op("(")) parse_signature(*sig);
    auto n = node(N::CallBlock, line);
    NodePtr call = parse_expression(true);
    if (call->type != N::Call) fail("expected a call after 'call'", line);
    n->kids.push_back(std::move(call));
    n->names = std::move(sig->names);
    for (auto& d : sig->kids) n->kids.push_back(std::move(d));
    expect_block_end();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_body({"endcall"}, &end);
    loop_depth_ = saved;
    expect_block_end();
    set_uses(*n, 1);
    return n;
  }

  NodePtr parse_filter_block(int line) {
    auto n = node(N::FilterBlock, line);
    n->kids.push_back(parse_filter_chain(nullptr, true));
    expect_block_end();
    std::string end;
    n->body = parse_body({"endfilter"}, &end);
    expect_block_end();
    return n;
  }

  NodePtr parse_with(int line) {
    auto n = node(N::With, line);
    while (cur().type != Tok::BlockEnd) {
      if (!n->names.empty()) expect_op(",");
      n->names.push_back(expect_name());
      expect_op("=");
      n->kids.push_back(parse_expression(true));
    }
    expect_block_end();
    std::string end;
    n->body = parse_body({"endwith"}, &end);
    expect_block_end();
    return n;
  }

  // ---- expressions ----
  // A comma-separated list becomes a tuple; `extra_end` names stop it (e.g. 'recursive').
  NodePtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end) {
    int line = cur().line;
    std::vector<NodePtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") ||
          (cur().type == Tok::Name &&
           std::find(extra_end.begin(), extra_end.end(), cur().text) != extra_end.end())) {
        if (items.empty()) fail("expected an expression, got " + describe(cur()));
        break;
      }
      items.push_back(parse_expression(with_condexpr));
    }
    if (!comma) return std::move(items[0]);
    auto tup = node(N::TupleLit, line);
    tup->kids = std::move(items);
    return tup;
  }

  NodePtr parse_expression(bool with_condexpr) {
    Depth d(*this);
    NodePtr expr = parse_or();
    if (!with_condexpr) return expr;
    while (is_name("if")) {
      int line = next().line;
      auto n = node(N::CondExpr, line);
      NodePtr cond = parse_or();
      NodePtr other = skip_name("else") ? parse_expression(true) : nullptr;
      n->kids.push_back(std::move(expr));
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(other));
      expr = std::move(n);
    }
    return expr;
  }

  NodePtr binary(const std::string& op, NodePtr a, NodePtr b, int line) {
    auto n = node(N::Binary, line);
    n->name = op;
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return n;
  }

  NodePtr parse_or() {
    NodePtr left = parse_and();
    while (is_name("or")) {
      int line = next().line;
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }
  NodePtr parse_and() {
    NodePtr left = parse_not();
    while (is_name("and")) {
      int line = next().line;
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }
  NodePtr parse_not() {
    Depth d(*this);
    if (is_name("not")) {
      auto n = node(N::Unary, next().line);
      n->name = "not";
      n->kids.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }
  NodePtr parse_compare() {
    int line = cur().line;
    NodePtr first = parse_math1();
    NodePtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(N::Compare, line);
        cmp->kids.push_back(std::move(first));
      }
      cmp->names.push_back(op);
      cmp->kids.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  NodePtr parse_math1() {
    NodePtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_concat(), t.line);
    }
    return left;
  }
  NodePtr parse_concat() {
    NodePtr left = parse_math2();
    while (is_op("~")) {
      int line = next().line;
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }
  NodePtr parse_math2() {
    NodePtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), parse_pow(), t.line);
    }
    return left;
  }
  NodePtr parse_pow() {
    NodePtr left = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }
  NodePtr parse_unary(bool with_filter) {
    Depth d(*this);
    NodePtr n;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      n = node(N::Unary, t.line);
      n->name = t.text;
      n->kids.push_back(parse_unary(false));
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  NodePtr parse_primary() {
    const Token& t = cur();
    if (t.type == Tok::Name) {
      next();
      auto n = node(N::Literal, t.line);
      if (t.text == "true" || t.text == "True") {
        n->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        n->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        n->value = Value::none();
      } else {
        n->type = N::Name;
        n->name = t.text;
      }
      return n;
    }
    if (t.type == Tok::String) {
      auto n = node(N::Literal, t.line);
      std::string s;
      while (cur().type == Tok::String) s += next().text;
      n->value = Value::string(std::move(s));
      return n;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      next();
      auto n = node(N::Literal, t.line);
      n->value = t.type == Tok::Int ? Value::integer(t.ival) : Value::number(t.fval);
      return n;
    }
    if (is_op("(")) {
      next();
      if (skip_op(")")) return node(N::TupleLit, t.line);
      NodePtr inner = parse_tuple(true, {});
      expect_op(")");
      return inner;
    }
    if (is_op("[")) {
      next();
      auto n = node(N::ListLit, t.line);
      while (!is_op("]")) {
        if (!n->kids.empty()) expect_op(",");
        if (is_op("]")) break;
        n->kids.push_back(parse_expression(true));
      }
      expect_op("]");
      return n;
    }
    if (is_op("{")) {
      next();
      auto n = node(N::DictLit, t.line);
      while (!is_op("}")) {
        if (!n->kids.empty()) expect_op(",");
        if (is_op("}")) break;
        n->kids.push_back(parse_expression(true));
        expect_op(":");
        n->kids.push_back(parse_expression(true));
      }
      expect_op("}");
      return n;
    }
    fail("unexpected " + describe(t));
  }

  NodePtr parse_postfix(NodePtr n) {
    while (true) {
      if (is_op(".")) {
        int line = next().line;
        if (cur().type == Tok::Int) {
          auto item = node(N::GetItem, line);
          item->kids.push_back(std::move(n));
          auto idx = node(N::Literal, line);
          idx->value = Value::integer(next().ival);
          item->kids.push_back(std::move(idx));
          n = std::move(item);
        } else {
          auto a = node(N::GetAttr, line);
          a->name = expect_name();
          a->kids.push_back(std::move(n));
          n = std::move(a);
        }
      } else if (is_op("[")) {
        n = parse_subscript(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  NodePtr parse_subscript(NodePtr n) {
    int line = next().line;
    std::vector<NodePtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail("expected a subscript", line);
    auto item = node(N::GetItem, line);
    item->kids.push_back(std::move(n));
    if (args.size() == 1) {
      item->kids.push_back(std::move(args[0]));
    } else {
      auto tup = node(N::TupleLit, line);
      tup->kids = std::move(args);
      item->kids.push_back(std::move(tup));
    }
    return item;
  }

  NodePtr parse_subscribed() {
    int line = cur().line;
    NodePtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto sl = node(N::Slice, line);
    sl->kids.push_back(std::move(start));
    sl->kids.push_back(is_op("]") || is_op(",") || is_op(":") ? nullptr : parse_expression(true));
    NodePtr step;
    if (skip_op(":") && !is_op("]") && !is_op(",")) step = parse_expression(true);
    sl->kids.push_back(std::move(step));
    return sl;
  }

  // jinja2's parse_call_args: positional, then keyword arguments, `*args`
  // and `**kwargs`, in that order.
  void parse_args(Node& n) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*")) {
        if (n.dyn_args || n.dyn_kwargs) fail("invalid argument syntax");
        next();
        n.dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        if (n.dyn_kwargs) fail("invalid argument syntax");
        next();
        n.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        if (n.dyn_kwargs) fail("invalid argument syntax");
        std::string key = next().text;
        next();
        for (const auto& kv : n.kwargs) {
          if (kv.first == key) fail("keyword argument repeated: " + key);
        }
        n.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (n.dyn_args || n.dyn_kwargs || !n.kwargs.empty()) fail("invalid argument syntax");
        n.kids.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  NodePtr parse_call(NodePtr callee) {
    auto n = node(N::Call, cur().line);
    n->kids.push_back(std::move(callee));
    parse_args(*n);
    return n;
  }

  NodePtr parse_filter_expr(NodePtr n) {
    while (true) {
      if (is_op("|")) {
        n = parse_filter_chain(std::move(n));
      } else if (is_name("is")) {
        n = parse_test(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  // `| name(args) | name ...`; with start_inline the first '|' is absent (filter blocks).
  NodePtr parse_filter_chain(NodePtr input, bool start_inline = false) {
    while (start_inline || is_op("|")) {
      if (!start_inline) next();
      start_inline = false;
      auto f = node(N::Filter, cur().line);
      f->name = expect_name();
      while (is_op(".")) {
        next();
        f->name += "." + expect_name();
      }
      f->kids.push_back(std::move(input));
      if (is_op("(")) parse_args(*f);
      input = std::move(f);
    }
    return input;
  }

  NodePtr parse_test(NodePtr input) {
    int line = next().line;  // 'is'
    auto n = node(N::Test, line);
    n->negated = skip_name("not");
    n->name = expect_name();
    while (is_op(".")) {
      next();
      n->name += "." + expect_name();
    }
    n->kids.push_back(std::move(input));
    const Token& t = cur();
    if (is_op("(")) {
      parse_args(*n);
    } else if ((t.type == Tok::Name || t.type == Tok::String || t.type == Tok::Int ||
                t.type == Tok::Float || is_op("[") || is_op("{")) &&
               !(t.type == Tok::Name && (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      n->kids.push_back(parse_postfix(parse_primary()));
    }
    return n;
  }

  const std::vector<Token>& t_;
  ParseOptions opt_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const ParseOptions& options) {
  return Parser(tokens, options).run();
}

}  // namespace hubzoo::jinja
