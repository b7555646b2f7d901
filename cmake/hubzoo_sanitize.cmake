# Sanitizer, fuzzer and Highway-target options of a build tree (scripts/sanitize
# configures one tree per combination: build-asan/, build-tsan/, build-fuzz/).
#
#   HUBZOO_SANITIZE   ;-list of address, undefined, thread, fuzzer (empty: none).
#                     Every target compiles and links with them; `fuzzer` compiles
#                     the libraries with -fsanitize=fuzzer-no-link and builds the
#                     libFuzzer targets of fuzz/ (clang only).
#   HUBZOO_HWY_TARGET ALL (default: every target Highway's dynamic dispatch knows),
#                     STATIC (only the one -march allows: HUBZOO_MARCH picks it),
#                     EMU128 (only the portable scalar one).
#   HUBZOO_MARCH      -march=<cpu> for every target (empty: the compiler default).
#                     Give a CPU name, not `native`: ccache keys on the flags, so
#                     an explicit name keeps objects of one machine's SIMD target
#                     from being reused on another.

set(HUBZOO_SANITIZE "" CACHE STRING "Sanitizers: ;-list of address, undefined, thread, fuzzer")
set(HUBZOO_HWY_TARGET "ALL" CACHE STRING "Highway targets compiled: ALL, STATIC or EMU128")
set_property(CACHE HUBZOO_HWY_TARGET PROPERTY STRINGS ALL STATIC EMU128)
set(HUBZOO_MARCH "" CACHE STRING "-march=<cpu> for every target (empty: compiler default)")

set(HUBZOO_FUZZERS OFF)
set(_hubzoo_san "")
foreach(s IN LISTS HUBZOO_SANITIZE)
  if(s STREQUAL "fuzzer")
    if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      message(FATAL_ERROR "HUBZOO_SANITIZE=fuzzer needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}")
    endif()
    set(HUBZOO_FUZZERS ON)
  elseif(s MATCHES "^(address|undefined|thread)$")
    list(APPEND _hubzoo_san ${s})
  else()
    message(FATAL_ERROR "HUBZOO_SANITIZE: unknown sanitizer '${s}' (address, undefined, thread, fuzzer)")
  endif()
endforeach()
if("thread" IN_LIST _hubzoo_san AND "address" IN_LIST _hubzoo_san)
  message(FATAL_ERROR "HUBZOO_SANITIZE: thread and address cannot be combined")
endif()

if(_hubzoo_san)
  list(JOIN _hubzoo_san "," _hubzoo_san_flag)
  # Stop at the first report (UBSan otherwise prints and continues); frame
  # pointers and line tables for readable stacks.
  add_compile_options(-fsanitize=${_hubzoo_san_flag} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=${_hubzoo_san_flag})
endif()
if(HUBZOO_FUZZERS)
  # Coverage instrumentation everywhere; only fuzz/ targets link libFuzzer's main.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(HUBZOO_HWY_TARGET STREQUAL "STATIC")
  add_compile_definitions(HWY_COMPILE_ONLY_STATIC=1)
elseif(HUBZOO_HWY_TARGET STREQUAL "EMU128")
  add_compile_definitions(HWY_COMPILE_ONLY_EMU128=1)
elseif(NOT HUBZOO_HWY_TARGET STREQUAL "ALL")
  message(FATAL_ERROR "HUBZOO_HWY_TARGET: '${HUBZOO_HWY_TARGET}' is not ALL, STATIC or EMU128")
endif()
if(HUBZOO_MARCH)
  if(HUBZOO_MARCH STREQUAL "native")
    message(FATAL_ERROR "HUBZOO_MARCH: give the CPU name (gcc -march=native -Q --help=target)")
  endif()
  # GCC fuses a * b + c into an FMA (C++ default -ffp-contract=fast) wherever the
  # target has one. A normal build compiles the code outside Highway's per-target
  # functions for baseline x86-64 (no FMA), so its scalar math rounds each
  # product; -march would change those bits (the bit-identity tests of ops/
  # fail), so contraction stays off. Highway's explicit MulAdd is unaffected.
  add_compile_options(-march=${HUBZOO_MARCH} -ffp-contract=off)
endif()
