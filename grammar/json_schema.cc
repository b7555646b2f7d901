#include "grammar/json_schema.h"

#include "grammar/json_schema_impl.h"

namespace hubzoo::grammar {

void compile_json_schema_into(Automaton& a, const nlohmann::ordered_json& schema) {
  detail::SchemaCompiler(a, schema).compile();
}

void compile_framed_json_schema_into(Automaton& a, const nlohmann::ordered_json& schema,
                                     const JsonFraming& framing) {
  detail::SchemaCompiler(a, schema).compile_framed(framing);
}

void compile_json_object_into(Automaton& a) {
  const nlohmann::ordered_json empty = nlohmann::ordered_json::object();
  detail::SchemaCompiler(a, empty).compile_any_object();
}

}  // namespace hubzoo::grammar
