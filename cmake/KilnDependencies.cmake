# Third-party dependencies: Debian 12 packages only (scripts/apt-packages.txt lists them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(TBB REQUIRED)
if(KILN_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(KILN_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
# cpp-httplib: Debian builds it as a shared library with TLS and compression on; its pkg-config
# flags must match (they change the layout of its structs).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
