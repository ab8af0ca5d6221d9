# Warning and sanitizer flags for kiln's own targets (never applied to third-party code).
# ccache keys relative to the source tree, the working directory not hashed (scripts/build.sh says
# why): set here as well, so a tree built with a bare `cmake --build` fills the cache with entries a
# clone in another folder can use.
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(_kiln_ccache ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=1 ${CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${_kiln_ccache})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_kiln_ccache})
endif()

# Debug information in RelWithDebInfo builds: line tables by default (backtraces, gdb and sanitizer
# reports still show file:line) compile in about 60% of the time of full DWARF (g++ on the heaviest
# files) and make objects a quarter the size; -DKILN_DEBUG_INFO=full for variables and types.
set(KILN_DEBUG_INFO lines CACHE STRING "RelWithDebInfo debug information: lines (line tables) or full")
set_property(CACHE KILN_DEBUG_INFO PROPERTY STRINGS lines full)
if(KILN_DEBUG_INFO STREQUAL "lines")
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    add_compile_options($<$<CONFIG:RelWithDebInfo>:-gline-tables-only>)
  else()
    add_compile_options($<$<CONFIG:RelWithDebInfo>:-g1>)
  endif()
elseif(NOT KILN_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "KILN_DEBUG_INFO must be lines or full (got '${KILN_DEBUG_INFO}')")
endif()

# Linker: lld where the compiler can use it. Links are not cached, and the test command links about
# 180 executables across its three builds: lld linked test_serve in 0.6 s against GNU ld's 2.1 s.
# -DKILN_LINKER=default keeps the compiler's own.
set(KILN_LINKER lld CACHE STRING "Linker: lld (when the compiler can use it) or default")
if(KILN_LINKER STREQUAL "lld")
  include(CheckLinkerFlag)
  check_linker_flag(CXX -fuse-ld=lld KILN_HAVE_LLD)
  if(KILN_HAVE_LLD)
    add_link_options(-fuse-ld=lld)
  endif()
elseif(NOT KILN_LINKER STREQUAL "default")
  message(FATAL_ERROR "KILN_LINKER must be lld or default (got '${KILN_LINKER}')")
endif()

add_library(kiln_warnings INTERFACE)
target_compile_options(kiln_warnings INTERFACE -Wall -Wextra -Werror -Wno-error=deprecated-declarations)

if(KILN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(KILN_FUZZ)
  # Coverage for libFuzzer in every library a fuzz target reaches (the targets themselves add
  # -fsanitize=fuzzer); without it the fuzzers see only their own translation unit's edges.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(KILN_TSAN)
  if(KILN_SANITIZE)
    message(FATAL_ERROR "KILN_TSAN and KILN_SANITIZE cannot be combined; use two build folders")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

# Give every binary an rpath relative to itself so the build tree and installs both work.
set(CMAKE_BUILD_RPATH_USE_ORIGIN ON)
