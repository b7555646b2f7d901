# install(): the C++ library for find_package(hubzoo) (component dev) and the
# Python package's pieces (component python, what pyproject.toml installs).
include(CMakePackageConfigHelpers)

set(HUBZOO_INSTALLED_LAYERS hubzoo_base hubzoo_tensor hubzoo_io hubzoo_hub hubzoo_ops
    hubzoo_layers hubzoo_models hubzoo_jinja hubzoo_tokenizer hubzoo_grammar hubzoo_engine)
set(HUBZOO_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hubzoo)

install(TARGETS ${HUBZOO_INSTALLED_LAYERS} hubzoo_all EXPORT hubzooTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT hubzooTargets NAMESPACE hubzoo:: DESTINATION ${HUBZOO_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(cmake/hubzooConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/cmake/hubzooConfig.cmake
                              INSTALL_DESTINATION ${HUBZOO_CMAKE_DIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/hubzooConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/hubzooConfig.cmake
              ${CMAKE_BINARY_DIR}/cmake/hubzooConfigVersion.cmake
        DESTINATION ${HUBZOO_CMAKE_DIR} COMPONENT dev)

# The CLI: bin/hubzoo, and in a wheel the scripts folder (the `hubzoo` command of pip install .).
install(TARGETS hubzoo RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT dev)
if(SKBUILD)
  install(TARGETS hubzoo RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR} COMPONENT python)
endif()
