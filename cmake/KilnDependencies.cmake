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
# KV-cache events (serve/kv_events.cpp): ZeroMQ's PUB/ROUTER sockets and msgpack-c's C packer, the
# transport and encoding vLLM's subscribers (llm-d's KV-cache indexer) read.
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
pkg_check_modules(MSGPACK REQUIRED IMPORTED_TARGET msgpack)
