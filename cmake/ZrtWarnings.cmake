# Warning and sanitizer flags. Warnings apply to ZRT's own targets through zrt_target_defaults();
# sanitizers apply to everything built in the tree (tests included) when ZRT_SANITIZE, ZRT_FUZZ
# or ZRT_TSAN is on.

if(ZRT_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>)
  # A Debug sanitizer build (assertions on) compiles at -O1, not -O0, as AddressSanitizer's
  # documentation advises for reasonable speed; with the frame pointer kept the reports still
  # show whole stacks.
  add_compile_options($<$<AND:$<CONFIG:Debug>,$<COMPILE_LANGUAGE:C,CXX>>:-O1>)
  add_link_options(-fsanitize=address,undefined)
endif()

# The fuzz build: coverage instrumentation for libFuzzer on everything, ASan and UBSan as in
# ZRT_SANITIZE; tests/fuzz links its targets with -fsanitize=fuzzer. libFuzzer is clang's.
if(ZRT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ZRT_FUZZ=ON needs clang (libFuzzer); configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(ZRT_SANITIZE)
    message(FATAL_ERROR "ZRT_FUZZ=ON already builds with ASan and UBSan; leave ZRT_SANITIZE off")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link,address,undefined>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
endif()

# ThreadSanitizer for the threaded parts (tests/CMakeLists.txt picks their tests). It cannot be
# combined with ASan; tests/support/tsan.supp lists what it is told to ignore, and why.
if(ZRT_TSAN)
  if(ZRT_SANITIZE OR ZRT_FUZZ)
    message(FATAL_ERROR "ZRT_TSAN=ON cannot be combined with ZRT_SANITIZE or ZRT_FUZZ (ASan)")
  endif()
  # -Wno-tsan: gcc warns at every atomic_thread_fence (TSan does not model fences). The fences
  # in ZRT (seqlocks read by signal handlers) and Boost.Asio order atomics TSan does see.
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=thread>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-Wno-tsan>)
  add_link_options(-fsanitize=thread)
endif()

function(zrt_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wundef>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${ZRT_WERROR}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endfunction()
