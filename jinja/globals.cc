// The template globals: jinja2's range, cycler and joiner, and the ones
// transformers adds or overrides (namespace, dict, raise_exception, strftime_now).
#include <ctime>

#include "jinja/builtins.h"

namespace hubzoo::jinja {
namespace {

bool is_intlike(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Bool; }
int64_t as_int(const Value& v) { return v.kind == Kind::Bool ? v.b : v.i; }

// dict(*args, **kwargs): one mapping or iterable of pairs, then keywords.
Value make_mapping(const CallArgs& a, Value d) {
  if (a.pos.size() > 1) {
    throw TemplateError("TypeError: dict expected at most 1 argument, got " +
                        std::to_string(a.pos.size()));
  }
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.kind == Kind::Dict || src.kind == Kind::Namespace) {
      for (const auto& kv : src.dict->items) d.dict->set(kv.first, kv.second);
    } else {
      for (const Value& pair : iterate(src)) {
        List kv = iterate(pair);
        if (kv.size() != 2) {
          throw TemplateError("ValueError: dictionary update sequence element has length " +
                              std::to_string(kv.size()) + "; 2 is required");
        }
        d.dict->set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kw) d.dict->set(Value::string(k), v);
  return d;
}

Value range(const CallArgs& a, int64_t max_range) {
  if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty())
    throw TemplateError("TypeError: range expected 1 to 3 arguments");
  for (const Value& v : a.pos) {
    if (!is_intlike(v)) {
      throw TemplateError("TypeError: '" + type_name(v) +
                          "' object cannot be interpreted as an integer");
    }
  }
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = as_int(a.pos[0]);
  } else {
    start = as_int(a.pos[0]);
    stop = as_int(a.pos[1]);
    if (a.pos.size() == 3) step = as_int(a.pos[2]);
  }
  if (step == 0) throw TemplateError("ValueError: range() arg 3 must not be zero");
  List out;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    if (static_cast<int64_t>(out.size()) >= max_range) {
      throw LimitError("range too big: the sandbox allows at most " + std::to_string(max_range) +
                       " items");
    }
    out.push_back(Value::integer(k));
  }
  return Value::make_list(std::move(out));
}

// jinja2.utils.Cycler: next() returns `current` and advances; reset() rewinds.
Value cycler(const CallArgs& a) {
  if (a.pos.empty()) throw TemplateError("RuntimeError: at least one item has to be provided");
  auto attrs = std::make_shared<Dict>();
  auto items = std::make_shared<List>(a.pos);
  auto pos = std::make_shared<size_t>(0);
  // The methods live in the dict they update: a weak reference avoids a cycle.
  std::weak_ptr<Dict> weak = attrs;
  auto sync = [weak, items, pos] {
    if (auto d = weak.lock()) {
      d->set(Value::string("current"), (*items)[*pos]);
      d->set(Value::string("pos"), Value::integer(static_cast<int64_t>(*pos)));
    }
  };
  sync();
  Dict* d = attrs.get();
  d->set(Value::string("items"), Value::tuple(*items));
  auto next = Value::callable("next", [items, pos, sync](CallArgs&) {
    Value rv = (*items)[*pos];
    *pos = (*pos + 1) % items->size();
    sync();
    return rv;
  });
  d->set(Value::string("next"), next);
  d->set(Value::string("reset"), Value::callable("reset", [pos, sync](CallArgs&) {
           *pos = 0;
           sync();
           return Value::none();
         }));
  return Value::object("Cycler", "<jinja2.utils.Cycler object>", attrs);
}

// jinja2.utils.Joiner: '' the first call, the separator after.
Value joiner(const CallArgs& a) {
  if (a.pos.size() + a.kw.size() > 1) throw TemplateError("TypeError: joiner takes one argument");
  std::string sep = to_str(a.get_or(0, "sep", Value::string(", ")));
  auto used = std::make_shared<bool>(false);
  auto attrs = std::make_shared<Dict>();
  attrs->set(Value::string("sep"), Value::string(sep));
  return Value::object("Joiner", "<jinja2.utils.Joiner object>", attrs,
                       [sep, used](CallArgs&) -> Value {
                         if (*used) return Value::string(sep);
                         *used = true;
                         return Value::string("");
                       });
}

}  // namespace

void add_globals(Dict& g, const RenderLimits& limits) {
  auto def = [&](const char* name, NativeFn fn) {
    g.items.emplace_back(Value::string(name), Value::callable(name, std::move(fn)));
  };
  const int64_t max_range = std::min<int64_t>(100000, limits.max_loop_iterations);
  def("range", [max_range](CallArgs& a) { return range(a, max_range); });
  def("namespace", [](CallArgs& a) -> Value {
    Value ns = make_mapping(a, Value::make_namespace());
    for (const auto& kv : ns.dict->items) {
      if (kv.first.is_string() && !kv.first.str().empty() && kv.first.str()[0] == '_') {
        throw SecurityError(
            "chat templates cannot store underscore-prefixed attributes on a namespace, but got " +
            repr(kv.first));
      }
    }
    return ns;
  });
  // transformers' TemplateDict: callable as dict(), with dict.fromkeys.
  auto dict_attrs = std::make_shared<Dict>();
  dict_attrs->set(Value::string("fromkeys"), Value::callable("fromkeys", [](CallArgs& a) {
                    if (a.pos.empty() || a.pos.size() > 2 || !a.kw.empty())
                      throw TemplateError("TypeError: fromkeys expected 1 or 2 arguments");
                    Value d = Value::make_dict();
                    Value fill = a.pos.size() > 1 ? a.pos[1] : Value::none();
                    for (const Value& k : iterate(a.pos[0])) d.dict->set(k, fill);
                    return d;
                  }));
  g.items.emplace_back(
      Value::string("dict"),
      Value::object("TemplateDict", "<TemplateDict object>", dict_attrs,
                    [](CallArgs& a) { return make_mapping(a, Value::make_dict()); }));
  def("cycler", [](CallArgs& a) { return cycler(a); });
  def("joiner", [](CallArgs& a) { return joiner(a); });
  def("raise_exception", [](CallArgs& a) -> Value {
    throw TemplateError(a.pos.empty() ? std::string() : to_str(a.pos[0]));
  });
  def("strftime_now", [](CallArgs& a) -> Value {
    if (a.pos.empty() || !a.pos[0].is_string())
      throw TemplateError("strftime_now(format) needs a format string");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = std::strftime(buf, sizeof buf, a.pos[0].str().c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
}

}  // namespace hubzoo::jinja
