# The linker: LLVM's lld where it is installed (scripts/install-deps.sh installs it). A build
# links about 120 programs (each test is its own), and lld links one in a quarter of GNU ld's
# time (runtime_engine_embedder_test: 1.5 s with ld.bfd, 0.4 s with lld, measured on CI's kind of
# machine); over CI's builds that is minutes. ZRT_LINKER=default keeps the compiler's own.
# Only this project's own links: an installed package's users link as they choose.
set(ZRT_LINKER auto CACHE STRING "auto (lld when installed), lld, or default")
set_property(CACHE ZRT_LINKER PROPERTY STRINGS auto lld default)
find_program(ZRT_LLD_PROGRAM ld.lld)
if(ZRT_LINKER STREQUAL "lld" OR (ZRT_LINKER STREQUAL "auto" AND ZRT_LLD_PROGRAM))
  if(NOT ZRT_LLD_PROGRAM)
    message(FATAL_ERROR "ZRT_LINKER=lld, but no ld.lld is installed (scripts/install-deps.sh installs lld)")
  endif()
  add_link_options($<$<LINK_LANGUAGE:CXX>:-fuse-ld=lld> $<$<LINK_LANGUAGE:C>:-fuse-ld=lld>)
  set(ZRT_LINKER_USED lld)
else()
  set(ZRT_LINKER_USED default)
endif()
