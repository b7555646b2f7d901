# The chat page of `hubzoo serve` (server/web/) and the Debian libraries it uses,
# embedded in hubzoo_server at build time (cmake/embed_files.cmake): served at
# their own paths, offline, no CDN. docs/dependencies.md says why each one.
set(HUBZOO_JS /usr/share/javascript)
set(HUBZOO_WEB_ENTRIES
    "/|${PROJECT_SOURCE_DIR}/server/web/index.html"
    "/assets/app.js|${PROJECT_SOURCE_DIR}/server/web/app.js"
    "/assets/render.js|${PROJECT_SOURCE_DIR}/server/web/render.js"
    "/assets/style.css|${PROJECT_SOURCE_DIR}/server/web/style.css"
    "/assets/marked.min.js|${HUBZOO_JS}/marked/marked.min.js"
    "/assets/purify.min.js|/usr/share/nodejs/dompurify/dist/purify.min.js"
    "/assets/highlight.min.js|${HUBZOO_JS}/highlight.js/highlight.min.js"
    "/assets/hljs-light.css|${HUBZOO_JS}/highlight.js/styles/a11y-light.css"
    "/assets/hljs-dark.css|${HUBZOO_JS}/highlight.js/styles/a11y-dark.css"
    "/assets/katex/katex.min.js|${HUBZOO_JS}/katex/katex.min.js"
    "/assets/katex/katex.min.css|${HUBZOO_JS}/katex/katex.min.css")
# KaTeX's fonts (fonts-katex): the woff2 files its stylesheet names first.
file(GLOB HUBZOO_KATEX_FONTS ${HUBZOO_JS}/katex/fonts/*.woff2)
if(NOT HUBZOO_KATEX_FONTS)
  message(FATAL_ERROR "KaTeX fonts missing under ${HUBZOO_JS}/katex/fonts: install fonts-katex")
endif()
foreach(font IN LISTS HUBZOO_KATEX_FONTS)
  get_filename_component(name ${font} NAME)
  list(APPEND HUBZOO_WEB_ENTRIES "/assets/katex/fonts/${name}|${font}")
endforeach()

set(HUBZOO_WEB_FILES "")
foreach(entry IN LISTS HUBZOO_WEB_ENTRIES)
  string(REGEX REPLACE "^[^|]*\\|" "" file "${entry}")
  if(NOT EXISTS ${file})
    message(FATAL_ERROR "The chat page needs ${file}: scripts/setup.sh installs its Debian package "
                        "(docs/dependencies.md)")
  endif()
  list(APPEND HUBZOO_WEB_FILES ${file})
endforeach()
string(REPLACE ";" "," HUBZOO_WEB_ARG "${HUBZOO_WEB_ENTRIES}")
add_custom_command(
  OUTPUT ${HUBZOO_GENERATED}/web_assets.cc
  COMMAND ${CMAKE_COMMAND} "-DFILES=${HUBZOO_WEB_ARG}" -DOUT=${HUBZOO_GENERATED}/web_assets.cc
          -P ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
  DEPENDS ${HUBZOO_WEB_FILES} ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
  COMMENT "Embedding the chat page and its libraries"
  VERBATIM)
target_sources(hubzoo_server PRIVATE ${HUBZOO_GENERATED}/web_assets.cc)
