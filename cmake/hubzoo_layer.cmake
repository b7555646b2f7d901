# One library per source folder, so the build states the layering.
#
#   hubzoo_library(ops DEPS hubzoo_hub PUBLIC_LIBS hwy::hwy PRIVATE_LIBS ... [NOT_INSTALLED])
#
# builds hubzoo_<folder> from <folder>/*.cc (tests and fuzz targets excluded; globbed with
# CONFIGURE_DEPENDS, so a new file needs no CMake edit). Its only PUBLIC include
# directory is build/include/<folder>, a staging folder holding one symlink,
# build/include/<folder>/<folder> -> <source>/<folder>. A target therefore sees
# "<folder>/x.h" for its own folder and the folders it links (DEPS, transitively)
# and nothing else: an upward include fails to compile ("No such file"), not
# merely to link.
#
#   hubzoo_folder_tests(engine MODELS_FILTER "MiniLM.*:SchedulerSmolLM2.*")
#
# builds hubzoo_<folder>_tests from <folder>/*_test.cc, linked to that folder's
# library only, and registers each gtest as its own ctest entry named
# "<folder>.<Suite>.<Test>". Suites matching MODELS_FILTER need the prepared real
# models (scripts/prepare_models.py) and get the ctest label `models`.

set(HUBZOO_INCLUDE_STAGING ${CMAKE_BINARY_DIR}/include)

# build/include/<folder>/<folder> -> <source>/<folder>; sets out_var to build/include/<folder>.
function(hubzoo_stage_includes folder out_var)
  set(staging ${HUBZOO_INCLUDE_STAGING}/${folder})
  file(MAKE_DIRECTORY ${staging})
  if(NOT IS_SYMLINK ${staging}/${folder})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${staging}/${folder} SYMBOLIC)
  endif()
  set(${out_var} ${staging} PARENT_SCOPE)
endfunction()

function(hubzoo_library folder)
  cmake_parse_arguments(arg "NOT_INSTALLED" "" "DEPS;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  set(src_dir ${PROJECT_SOURCE_DIR}/${folder})
  file(GLOB sources CONFIGURE_DEPENDS ${src_dir}/*.cc)
  # <name>_test.cc: gtests (hubzoo_folder_tests); <name>_fuzz.cc: libFuzzer targets (fuzz/).
  list(FILTER sources EXCLUDE REGEX "_(test|fuzz)\\.cc$")
  set(target hubzoo_${folder})
  # A header-only folder (base/ today) is an INTERFACE library.
  if(sources)
    add_library(${target} STATIC ${sources})
    set(public PUBLIC)
    set(private PRIVATE)
  else()
    add_library(${target} INTERFACE)
    set(public INTERFACE)
    set(private INTERFACE)
  endif()

  hubzoo_stage_includes(${folder} staging)
  target_include_directories(${target} ${public} $<BUILD_INTERFACE:${staging}>
                                                 $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} ${public} ${arg_DEPS} ${arg_PUBLIC_LIBS})
  target_link_libraries(${target} ${private} ${arg_PRIVATE_LIBS})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${folder})
  add_library(hubzoo::${folder} ALIAS ${target})

  # Installed headers keep their "<folder>/x.h" include paths; test-only helpers stay out.
  if(arg_NOT_INSTALLED)
    return()
  endif()
  file(GLOB headers CONFIGURE_DEPENDS ${src_dir}/*.h)
  list(FILTER headers EXCLUDE REGEX "/test_[^/]*\\.h$|_test\\.h$")
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${folder} COMPONENT dev)
endfunction()

function(hubzoo_folder_tests folder)
  cmake_parse_arguments(arg "" "MODELS_FILTER" "LIBS" ${ARGN})
  file(GLOB tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${folder}/*_test.cc)
  if(NOT tests)
    return()
  endif()
  set(target hubzoo_${folder}_tests)
  add_executable(${target} ${tests})
  target_link_libraries(${target} PRIVATE hubzoo_${folder} ${arg_LIBS} GTest::gtest
                                          GTest::gtest_main)
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(arg_MODELS_FILTER)
    gtest_discover_tests(${target} TEST_PREFIX ${folder}. TEST_FILTER "-${arg_MODELS_FILTER}")
    gtest_discover_tests(${target} TEST_PREFIX ${folder}. TEST_FILTER "${arg_MODELS_FILTER}"
                         PROPERTIES LABELS models)
  else()
    gtest_discover_tests(${target} TEST_PREFIX ${folder}.)
  endif()
endfunction()

# The generated hubzoo_commit.h (HUBZOO_GIT_COMMIT) and HUBZOO_VERSION, private
# to the targets that print them (CLI, server fingerprint, bindings, benches).
function(hubzoo_use_commit target)
  target_include_directories(${target} PRIVATE ${HUBZOO_GENERATED})
  target_compile_definitions(${target} PRIVATE HUBZOO_VERSION="${PROJECT_VERSION}")
  add_dependencies(${target} hubzoo_git_commit)
endfunction()
