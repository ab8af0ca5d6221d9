# kiln_add_plugin(<name> SOURCES <files...> [LIBRARIES <libs...>])
#
# Builds <name> as a loadable plugin module (`<name>.so`, only kiln_plugin_get_descriptor exported).
# In kiln's own tree it also builds <name>_static (a static library compiled with KILN_PLUGIN_STATIC,
# exporting kiln_plugin_descriptor_<name> for the host to register without dlopen) and puts the
# module into the build's plugins/ folder beside the kiln executable.
function(kiln_add_plugin name)
  cmake_parse_arguments(KP "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${name} MODULE ${KP_SOURCES})
  set_target_properties(${name} PROPERTIES PREFIX "" CXX_VISIBILITY_PRESET hidden
                                           VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${name} PRIVATE Kiln::sdk ${KP_LIBRARIES})
  # Undefined symbols are link errors, not dlopen-time surprises. Not in kiln's sanitizer builds:
  # clang puts the ASan/UBSan runtime into the executable, so a module's __asan_* references can only
  # be resolved when it is loaded.
  if(NOT KILN_SANITIZE)
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()
  if(TARGET kiln_warnings)
    target_link_libraries(${name} PRIVATE kiln_warnings)
  endif()
  if(DEFINED KILN_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${KILN_PLUGIN_OUTPUT_DIR})
    add_library(${name}_static STATIC ${KP_SOURCES})
    target_compile_definitions(${name}_static PRIVATE KILN_PLUGIN_STATIC)
    target_link_libraries(${name}_static PUBLIC Kiln::sdk ${KP_LIBRARIES})
    if(TARGET kiln_warnings)
      target_link_libraries(${name}_static PRIVATE kiln_warnings)
    endif()
    set_property(GLOBAL APPEND PROPERTY KILN_STATIC_PLUGINS ${name})
  endif()
endfunction()
