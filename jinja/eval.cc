#include "jinja/eval.h"

#include <algorithm>
#include <optional>

#include "base/error.h"
#include "jinja/builtins.h"
#include "jinja/sandbox.h"

namespace hubzoo::jinja {
namespace {

// A variable scope. Closures (macros, caller, loop()) refer to their defining
// frame weakly and the Renderer keeps it alive until the render ends: a frame
// holds the macros defined in it, so a strong reference would be a cycle.
struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;

  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get()) {
      for (const auto& [k, v] : f->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& kv : vars) {
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};
using FramePtr = std::shared_ptr<Frame>;
using WeakFrame = std::weak_ptr<Frame>;

FramePtr child(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

enum class Flow { Normal, Break, Continue };

// Adds the line to a runtime error's message, once.
[[noreturn]] void rethrow_with_line(const TemplateError& e, int line) {
  std::string msg = e.what();
  if (msg.rfind("chat template error", 0) != 0) {
    msg = "chat template error at line " + std::to_string(line) + ": " + msg;
  }
  if (dynamic_cast<const LimitError*>(&e)) throw LimitError(msg);
  if (dynamic_cast<const SecurityError*>(&e)) throw SecurityError(msg);
  throw TemplateError(msg);
}

// `-v`, `+v`, `not v`.
Value unary_op(const std::string& op, const Value& v) {
  if (op == "not") return Value::boolean(!truthy(v));
  if (v.is_undefined()) v.raise_undefined();
  if (v.kind == Kind::Int || v.kind == Kind::Bool) {
    int64_t x = v.kind == Kind::Bool ? v.b : v.i;
    return Value::integer(op == "-" ? -x : x);
  }
  if (v.kind == Kind::Float) return Value::number(op == "-" ? -v.f : v.f);
  throw TemplateError("TypeError: bad operand type for unary " + op + ": '" + type_name(v) + "'");
}

// One comparison of a chain: == != < > <= >= in, or `not in`.
bool compare(const std::string& op, const Value& left, const Value& right) {
  if (op == "==") return equals(left, right);
  if (op == "!=") return !equals(left, right);
  if (op == "<") return less(left, right);
  if (op == ">") return less(right, left);
  if (op == "<=") return less(left, right) || equals(left, right);
  if (op == ">=") return less(right, left) || equals(left, right);
  if (op == "in") return contains(right, left);
  return !contains(right, left);
}

class Renderer {
 public:
  Renderer(std::shared_ptr<const Body> body, const RenderLimits& limits)
      : sandbox_(limits), body_(std::move(body)), limits_(limits) {}

  std::string render(const Value& context) {
    auto globals = std::make_shared<Frame>();
    Dict g;
    add_globals(g, limits_);
    for (auto& [k, v] : g.items) globals->set(k.str(), v);
    auto top = child(globals);
    if (context.kind == Kind::Dict) {
      for (const auto& [k, v] : context.dict->items) {
        if (k.kind == Kind::String) top->set(k.str(), v);
      }
    }
    std::string out;
    exec(*body_, top, out);
    return out;
  }

 private:
  void emit(std::string& out, const std::string& s) {
    if (out.size() + s.size() > limits_.max_output_bytes) {
      throw LimitError("output exceeds max_output_bytes (" +
                       std::to_string(limits_.max_output_bytes) + ")");
    }
    out += s;
  }

  Flow exec(const Body& body, const FramePtr& frame, std::string& out) {
    for (const auto& n : body) {
      Flow f = exec_one(*n, frame, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_one(const Node& n, const FramePtr& frame, std::string& out) {
    try {
      sandbox_.step();
      switch (n.type) {
        case N::Text:
          emit(out, n.name);
          return Flow::Normal;
        case N::Output:
          emit(out, to_str(eval(*n.kids[0], frame)));
          return Flow::Normal;
        case N::If:
          return exec(truthy(eval(*n.kids[0], frame)) ? n.body : n.else_body, frame, out);
        case N::For:
          return exec_for(n, frame, out);
        case N::Set:
          exec_set(n, frame);
          return Flow::Normal;
        case N::Macro:
          frame->set(n.name, make_macro(n, frame, false));
          return Flow::Normal;
        case N::CallBlock: {
          // The macro receives `caller` as an extra keyword argument, as in jinja2.
          const Node& call = *n.kids[0];
          Value fn = eval(*call.kids[0], frame);
          CallArgs args = eval_args(call, frame, 1);
          args.kw.emplace_back("caller", make_macro(n, frame, true));
          emit(out, to_str(call_value(fn, args)));
          return Flow::Normal;
        }
        case N::FilterBlock: {
          std::string inner;
          exec(n.body, frame, inner);
          emit(out, to_str(eval_filter_chain(*n.kids[0], Value::string(std::move(inner)), frame)));
          return Flow::Normal;
        }
        case N::With: {
          FramePtr f = child(frame);
          for (size_t k = 0; k < n.names.size(); ++k) f->set(n.names[k], eval(*n.kids[k], frame));
          return exec(n.body, f, out);
        }
        case N::Generation:
          return exec(n.body, frame, out);
        case N::Break:
          return Flow::Break;
        case N::Continue:
          return Flow::Continue;
        default:
          throw TemplateError("unexpected node");
      }
    } catch (const TemplateError& e) {
      rethrow_with_line(e, n.line);
    }
  }

  void assign(const Node& target, const Value& v, const FramePtr& frame) {
    if (target.type == N::Name) {
      frame->set(target.name, v);
      return;
    }
    if (target.type == N::NsRef) {
      const Value* ns = frame->find(target.name);
      if (!ns || ns->kind != Kind::Namespace) {
        throw TemplateError("cannot assign attribute on non-namespace object");
      }
      if (!target.attr.empty() && target.attr[0] == '_') {
        throw SecurityError(
            "chat templates cannot store underscore-prefixed attributes on a namespace");
      }
      ns->dict->set(Value::string(target.attr), v);
      return;
    }
    List items = iterate(v);
    if (items.size() != target.kids.size()) {
      throw TemplateError(items.size() > target.kids.size()
                              ? "ValueError: too many values to unpack (expected " +
                                    std::to_string(target.kids.size()) + ")"
                              : "ValueError: not enough values to unpack (expected " +
                                    std::to_string(target.kids.size()) + ", got " +
                                    std::to_string(items.size()) + ")");
    }
    for (size_t k = 0; k < items.size(); ++k) assign(*target.kids[k], items[k], frame);
  }

  void exec_set(const Node& n, const FramePtr& frame) {
    if (n.kids[1]) {
      assign(*n.kids[0], eval(*n.kids[1], frame), frame);
      return;
    }
    std::string inner;
    exec(n.body, frame, inner);
    Value v = Value::string(std::move(inner));
    if (n.kids[2]) v = eval_filter_chain(*n.kids[2], v, frame);
    assign(*n.kids[0], v, frame);
  }

  Flow exec_for(const Node& n, const FramePtr& frame, std::string& out) {
    return run_loop(n, frame, eval(*n.kids[1], frame), 0, out);
  }

  // One (possibly recursive) run of a for loop over `iterable`; `depth0`
  // counts recursion levels, as jinja2's LoopContext.depth0.
  // Returns the for-else body's break/continue, which belongs to an outer loop.
  Flow run_loop(const Node& n, const FramePtr& frame, const Value& iterable, int64_t depth0,
                std::string& out) {
    List all = iterate(iterable);
    List items;
    if (n.kids[2]) {  // `for x in xs if cond`: filtered before loop.* is counted
      for (const Value& v : all) {
        FramePtr f = child(frame);
        assign(*n.kids[0], v, f);
        if (truthy(eval(*n.kids[2], f))) items.push_back(v);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      return exec(n.else_body, child(frame), out);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    auto last_changed = new_dict();  // loop.changed()'s memory: it may come to hold the loop
    sandbox_.track_mutable(last_changed);
    NativeFn recurse;
    if (n.recursive) {
      keep_alive(frame);
      recurse = [this, alive = std::weak_ptr<int>(alive_), &n, weak = WeakFrame(frame),
                 depth0](CallArgs& a) -> Value {
        FramePtr frame = lock_closure(alive, weak);
        if (a.pos.size() != 1 || !a.kw.empty()) {
          throw TemplateError(
              "TypeError: loop() takes exactly one argument (the items to recurse into)");
        }
        CallGuard guard(*this);
        std::string inner;
        run_loop(n, frame, a.pos[0], depth0 + 1, inner);
        return Value::string(std::move(inner));
      };
    } else {
      recurse = [](CallArgs&) -> Value {
        throw TemplateError(
            "TypeError: The loop must have the 'recursive' marker to be called recursively.");
      };
    }
    for (int64_t k = 0; k < len; ++k) {
      sandbox_.step();
      if (++iterations_ > limits_.max_loop_iterations) {
        throw LimitError("loop iterations exceed max_loop_iterations (" +
                         std::to_string(limits_.max_loop_iterations) + ")");
      }
      FramePtr f = child(frame);
      if (n.uses_loop) f->set("loop", loop_context(k, items, depth0, last_changed, recurse));
      assign(*n.kids[0], items[k], f);
      if (exec(n.body, f, out) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  // jinja2's LoopContext for iteration k of `items`.
  static Value loop_context(int64_t k, const List& items, int64_t depth0,
                            const std::shared_ptr<Dict>& last_changed, const NativeFn& recurse) {
    const int64_t len = static_cast<int64_t>(items.size());
    auto d = new_dict();
    auto put = [&](const char* key, Value v) { d->items.emplace_back(Value::string(key), v); };
    put("index", Value::integer(k + 1));
    put("index0", Value::integer(k));
    put("revindex", Value::integer(len - k));
    put("revindex0", Value::integer(len - k - 1));
    put("first", Value::boolean(k == 0));
    put("last", Value::boolean(k == len - 1));
    put("length", Value::integer(len));
    put("depth", Value::integer(depth0 + 1));
    put("depth0", Value::integer(depth0));
    put("previtem", k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
    put("nextitem", k + 1 < len ? items[k + 1] : Value::undefined("there is no next item"));
    put("cycle", Value::callable("cycle", [k](CallArgs& a) -> Value {
          if (a.pos.empty()) throw TemplateError("TypeError: no items for cycling given");
          return a.pos[k % a.pos.size()];
        }));
    put("changed", Value::callable("changed", [last_changed](CallArgs& a) -> Value {
          Value now = Value::tuple(a.pos);
          const Value* before = last_changed->find("last");
          if (before && equals(*before, now)) return Value::boolean(false);
          last_changed->set(Value::string("last"), now);
          return Value::boolean(true);
        }));
    return Value::object("LoopContext",
                         "<LoopContext " + std::to_string(k + 1) + "/" + std::to_string(len) + ">",
                         d, recurse);
  }

  // Counts nested macro, caller() and recursive loop() calls.
  struct CallGuard {
    Renderer& r;
    explicit CallGuard(Renderer& renderer) : r(renderer) {
      if (++r.call_depth_ > r.limits_.max_call_depth) {
        --r.call_depth_;
        throw LimitError("macro calls nested deeper than max_call_depth (" +
                         std::to_string(r.limits_.max_call_depth) + ")");
      }
    }
    ~CallGuard() { --r.call_depth_; }
  };

  // A macro, or a call block's caller, as a callable closing over `frame`.
  // Arguments bind as jinja2's Macro.__call__ binds them.
  Value make_macro(const Node& n, const FramePtr& frame, bool is_caller) {
    const std::string name = is_caller ? "caller" : n.name;
    const size_t default_offset = is_caller ? 1 : 0;  // a call block's kids[0] is the call
    auto attrs = new_dict();
    List params;
    for (const auto& p : n.names) params.push_back(Value::string(p));
    attrs->set(Value::string("name"), is_caller ? Value::none() : Value::string(name));
    attrs->set(Value::string("arguments"), Value::tuple(std::move(params)));
    attrs->set(Value::string("catch_kwargs"), Value::boolean(n.uses.kwargs));
    attrs->set(Value::string("catch_varargs"), Value::boolean(n.uses.varargs));
    attrs->set(Value::string("caller"), Value::boolean(n.uses.caller));
    keep_alive(frame);
    auto call = [this, alive = std::weak_ptr<int>(alive_), &n, weak = WeakFrame(frame), name,
                 default_offset](CallArgs& args) -> Value {
      FramePtr frame = lock_closure(alive, weak);
      CallGuard guard(*this);
      const auto& params = n.names;
      const size_t count = params.size();
      FramePtr f = child(frame);
      std::vector<std::pair<std::string, Value>> kwargs = args.kw;
      auto pop_kw = [&](const std::string& key) -> std::optional<Value> {
        for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
          if (it->first == key) {
            Value v = std::move(it->second);
            kwargs.erase(it);
            return v;
          }
        }
        return std::nullopt;
      };
      std::vector<std::optional<Value>> bound(count);
      const size_t given = std::min(args.pos.size(), count);
      for (size_t p = 0; p < given; ++p) bound[p] = args.pos[p];
      bool found_caller = false;
      if (given != count) {
        for (size_t p = given; p < count; ++p) {
          bound[p] = pop_kw(params[p]);
          if (params[p] == "caller") found_caller = true;
        }
      } else {
        found_caller = std::count(params.begin(), params.end(), "caller") > 0;
      }
      if (n.uses.caller && !found_caller) {
        std::optional<Value> c = pop_kw("caller");
        f->set("caller", c ? *c : Value::undefined("No caller defined"));
      }
      if (n.uses.kwargs) {
        Value kw = Value::make_dict();
        for (auto& [k, v] : kwargs) kw.dict->set(Value::string(k), v);
        f->set("kwargs", kw);
      } else if (!kwargs.empty()) {
        for (const auto& kv : kwargs) {
          if (kv.first == "caller") {
            throw TemplateError("TypeError: macro '" + name +
                                "' was invoked with two values for the special caller argument");
          }
        }
        throw TemplateError("TypeError: macro '" + name + "' takes no keyword argument '" +
                            kwargs[0].first + "'");
      }
      if (n.uses.varargs) {
        f->set("varargs", Value::tuple(List(args.pos.begin() + given, args.pos.end())));
      } else if (args.pos.size() > count) {
        throw TemplateError("TypeError: macro '" + name + "' takes not more than " +
                            std::to_string(count) + " argument(s)");
      }
      for (size_t p = 0; p < count; ++p) {  // defaults see the parameters before them
        if (bound[p]) {
          f->set(params[p], *bound[p]);
        } else if (const Node* def = n.kids[p + default_offset].get()) {
          f->set(params[p], eval(*def, f));
        } else {
          f->set(params[p], Value::undefined("parameter '" + params[p] + "' was not provided"));
        }
      }
      std::string out;
      exec(n.body, f, out);
      return Value::string(std::move(out));
    };
    return Value::object("Macro", is_caller ? "<Macro anonymous>" : "<Macro '" + name + "'>", attrs,
                         call);
  }

  // Keeps a closure's frame alive until the render ends.
  void keep_alive(const FramePtr& frame) {
    if (closure_frames_.empty() || closure_frames_.back() != frame) {
      charge_bytes(kValueOverhead, "a closure's scope");
      closure_frames_.push_back(frame);
    }
  }
  // A closure's frame; the closure may have escaped into a namespace the
  // caller passed in, and then outlive the render (and this Renderer).
  static FramePtr lock_closure(const std::weak_ptr<int>& alive, const WeakFrame& weak) {
    FramePtr f = alive.expired() ? nullptr : weak.lock();
    if (!f) throw TemplateError("a macro was called after its template finished rendering");
    return f;
  }

  Value call_value(const Value& fn, CallArgs& args) {
    if (fn.is_undefined()) fn.raise_undefined();
    sandbox_.step();
    if (fn.kind != Kind::Callable || !fn.fn->fn) {
      throw TemplateError("TypeError: '" + type_name(fn) + "' object is not callable");
    }
    return fn.fn->fn(args);
  }

  Value eval_filter_chain(const Node& n, const Value& innermost, const FramePtr& frame) {
    Value input = n.kids[0] ? eval_filter_chain(*n.kids[0], innermost, frame) : innermost;
    CallArgs args = eval_args(n, frame, 1);
    return apply_filter(n.name, input, args, limits_);
  }

  CallArgs eval_args(const Node& n, const FramePtr& frame, size_t first) {
    CallArgs args;
    for (size_t k = first; k < n.kids.size(); ++k) args.pos.push_back(eval(*n.kids[k], frame));
    for (const auto& [key, e] : n.kwargs) args.kw.emplace_back(key, eval(*e, frame));
    if (n.dyn_args) {
      for (Value& v : iterate(eval(*n.dyn_args, frame))) args.pos.push_back(std::move(v));
    }
    if (n.dyn_kwargs) {
      Value kw = eval(*n.dyn_kwargs, frame);
      if (kw.kind != Kind::Dict) {
        throw TemplateError("TypeError: argument after ** must be a mapping, not " + type_name(kw));
      }
      for (const auto& [k, v] : kw.dict->items) {
        if (!k.is_string()) throw TemplateError("TypeError: keywords must be strings");
        for (const auto& kv : args.kw) {
          if (kv.first == k.str()) {
            throw TemplateError("TypeError: got multiple values for keyword argument '" + k.str() +
                                "'");
          }
        }
        args.kw.emplace_back(k.str(), v);
      }
    }
    return args;
  }

  // obj[key] or obj[start:stop:step].
  Value eval_item(const Node& n, const FramePtr& frame) {
    Value obj = eval(*n.kids[0], frame);
    if (obj.is_undefined()) obj.raise_undefined();
    const Node& key = *n.kids[1];
    if (key.type == N::Slice) {
      auto part = [&](const NodePtr& p) { return p ? eval(*p, frame) : Value::none(); };
      return get_slice(obj, part(key.kids[0]), part(key.kids[1]), part(key.kids[2]));
    }
    return get_item(obj, eval(key, frame));
  }

  Value eval(const Node& n, const FramePtr& frame) {
    switch (n.type) {
      case N::Literal:
        return n.value;
      case N::Name: {
        const Value* v = frame->find(n.name);
        return v ? *v : Value::undefined("'" + n.name + "' is undefined");
      }
      case N::ListLit:
      case N::TupleLit: {
        List items;
        for (const auto& k : n.kids) items.push_back(eval(*k, frame));
        return n.type == N::ListLit ? Value::make_list(std::move(items))
                                    : Value::tuple(std::move(items));
      }
      case N::DictLit: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          d.dict->set(eval(*n.kids[k], frame), eval(*n.kids[k + 1], frame));
        }
        return d;
      }
      case N::Unary:
        return unary_op(n.name, eval(*n.kids[0], frame));
      case N::Binary: {
        Value a = eval(*n.kids[0], frame);
        if (n.name == "and") return truthy(a) ? eval(*n.kids[1], frame) : a;
        if (n.name == "or") return truthy(a) ? a : eval(*n.kids[1], frame);
        return binary_op(n.name, a, eval(*n.kids[1], frame), limits_);
      }
      case N::Compare: {
        Value left = eval(*n.kids[0], frame);
        for (size_t k = 0; k < n.names.size(); ++k) {  // a < b < c: each pair, lazily
          Value right = eval(*n.kids[k + 1], frame);
          if (!compare(n.names[k], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case N::CondExpr: {
        if (truthy(eval(*n.kids[1], frame))) return eval(*n.kids[0], frame);
        if (n.kids[2]) return eval(*n.kids[2], frame);
        return Value::undefined("the inline if-expression on line " + std::to_string(n.line) +
                                " evaluated to false and no else section was defined.");
      }
      case N::GetAttr: {
        Value obj = eval(*n.kids[0], frame);
        if (obj.is_undefined()) obj.raise_undefined();
        return get_attr(obj, n.name);
      }
      case N::GetItem:
        return eval_item(n, frame);
      case N::Call: {
        Value fn = eval(*n.kids[0], frame);
        if (fn.is_undefined()) fn.raise_undefined();
        CallArgs args = eval_args(n, frame, 1);
        return call_value(fn, args);
      }
      case N::Filter: {
        if (!n.kids[0]) throw TemplateError("filter without input");
        Value input = eval(*n.kids[0], frame);
        CallArgs args = eval_args(n, frame, 1);
        return apply_filter(n.name, input, args, limits_);
      }
      case N::Test: {
        Value input = eval(*n.kids[0], frame);
        CallArgs args = eval_args(n, frame, 1);
        return Value::boolean(apply_test(n.name, input, args) != n.negated);
      }
      default:
        throw TemplateError("unexpected expression node");
    }
  }

  Sandbox sandbox_;  // first: destroyed last, after the frames below
  std::shared_ptr<const Body> body_;
  RenderLimits limits_;
  std::vector<FramePtr> closure_frames_;                   // scopes of the render's closures
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // expires with the Renderer
  int64_t iterations_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Template::Template(const std::string& source, const LexOptions& lex,
                   const ParseOptions& parse_opt) {
  auto body = std::make_shared<Body>(parse(tokenize(source, lex), parse_opt));
  check_filter_and_test_names(*body);
  body_ = std::move(body);
}

std::string Template::render(const Value& context, const RenderLimits& limits) const {
  Renderer r(body_, limits);
  return r.render(context);
}

}  // namespace hubzoo::jinja
