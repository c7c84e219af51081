# Test registration helpers.
#   zrt_add_test(NAME n SOURCES ... [LIBS ...] [TIMEOUT s] [LABELS ...] [CUDA])
#     A single-process doctest program. CUDA: a GPU test, skipped (exit 77) without a device.
#   zrt_add_mpi_test(NAME n SOURCES ... [LIBS ...] [RANKS 1 2 4] [TIMEOUT s] [LABELS ...])
#     A doctest program linked with the MPI test main (tests/support), registered once per rank
#     count as n_np<R> and started with mpirun; root and oversubscribe flags are added here.
#   SANITIZE_SHARDS f1 f2 ... (either): under ZRT_SANITIZE the program is registered as several
#     tests, n_shard<k> (n_np<R>_shard<k>), shard k running the test cases that match doctest
#     filter f<k> (--test-case= syntax: wildcards, commas between patterns) and none of the
#     earlier shards', and one last shard all the rest: every test case runs in exactly one shard,
#     a case added later in the last. Other builds register the program whole.
# With ZRT_TSAN only the programs in ZRT_TSAN_PROGRAMS (tests/CMakeLists.txt) are registered.
# No test may take over ZRT_TEST_TIMEOUT_MAX (120 s) in any build, the sanitized ones included
# (CI's budget, scripts/run-tests.sh): TIMEOUT defaults to it and a larger one is an error.
set(ZRT_TEST_TIMEOUT_MAX 120)

# A release tree whose tests a sanitizer tree of the same sources runs as well (scripts/run-tests.sh
# sets this for its release tree when its ASan + UBSan pass follows) leaves to that tree what it
# runs whole: the programs of zrt_add_test and zrt_add_mpi_test (all but GPU tests, on every rank
# count but the 4 ranks that tree leaves out) are not registered here, nor built unless another
# test runs them (zrt_test_program_needed); nor are the tests registered with add_test that the
# sanitizer tree runs the same (their sites test ZRT_SANITIZED_ELSEWHERE). The tests this tree
# still runs are the ones only an optimised, uninstrumented build can run or the sanitizer tree
# runs in part: the GPU tests, the 4-rank runs, the benchmarks, the install and Python package
# tests, zrt-train's equivalence, checkpoint and strict checks whole. Every test runs once at
# least; scripts/build.sh builds and registers every one.
option(ZRT_SANITIZED_ELSEWHERE
       "Leave the doctest programs a sanitizer tree also runs to that tree (run-tests.sh)" OFF)
if(ZRT_SANITIZED_ELSEWHERE)
  # Said at configure time: this tree's ctest alone is not the whole suite.
  message(STATUS "ZRT_SANITIZED_ELSEWHERE: tests a sanitizer tree runs are not built or registered "
                 "here; run that tree's suite too (scripts/run-tests.sh does)")
endif()

execute_process(COMMAND id -u OUTPUT_VARIABLE ZRT_UID OUTPUT_STRIP_TRAILING_WHITESPACE)
# --bind-to none: each rank runs helper threads (communication progress, copy engines, I/O
# rings); bound to one core, they would queue behind the rank's own compute.
set(ZRT_MPIEXEC_FLAGS --oversubscribe --bind-to none)
if(ZRT_UID STREQUAL "0")
  list(APPEND ZRT_MPIEXEC_FLAGS --allow-run-as-root)
endif()
# Tests run Open MPI as users do, with the single-copy mechanism it picks (cma works as root in
# the 2026-12 build container). Where a container forbids cross-memory attach, configure with
# -DZRT_MPI_SINGLE_COPY=none to copy through shared memory instead.
set(ZRT_MPI_SINGLE_COPY "" CACHE STRING
    "btl_vader_single_copy_mechanism for tests run under mpirun (empty: Open MPI's choice)")
if(ZRT_MPI_SINGLE_COPY)
  list(APPEND ZRT_MPIEXEC_FLAGS --mca btl_vader_single_copy_mechanism ${ZRT_MPI_SINGLE_COPY})
endif()

# Environment for every test. AddressSanitizer keeps its fast unwinder (frame pointers) for the
# stacks it records on malloc: no report needs a whole stack through Open MPI's plugins, because
# MpiEnvironment does not track what MPI_Init allocates and checks for leaks before MPI_Finalize,
# with the check at exit turned off (comm/mpi/mpi_leak_check.h). The slow unwinder, which the
# programs on MPI used before, cost them four to five times the CPU (docs/operations.md).
set(ZRT_TEST_ENV
  "ASAN_OPTIONS=detect_leaks=1"
  "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/support/lsan.supp:print_suppressions=0"
  "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
  "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/support/tsan.supp:second_deadlock_stack=1"
  "OMPI_MCA_rmaps_base_oversubscribe=1")

# zrt_test_timeout(VAR NAME): VAR (a TIMEOUT argument, maybe empty) defaulted to, and checked
# against, ZRT_TEST_TIMEOUT_MAX. Tests registered with add_test directly give a TIMEOUT of at most
# that too; ctest --timeout in run-tests.sh covers any that gives none.
function(zrt_test_timeout var name)
  if(NOT ${var})
    set(${var} ${ZRT_TEST_TIMEOUT_MAX} PARENT_SCOPE)
  elseif(${var} GREATER ZRT_TEST_TIMEOUT_MAX)
    message(FATAL_ERROR "${name}: TIMEOUT ${${var}} s is over ${ZRT_TEST_TIMEOUT_MAX} s, the most a test "
                        "may take (CI's budget); make the test smaller")
  endif()
endfunction()

# zrt_shard_args(VAR K ARGS_LIST SHARDS_LIST): in VAR, the command-line arguments of shard K
# (1-based; K = the number of shards + 1 is the last one, "the rest") of a program run with the
# arguments in list ARGS_LIST, sharded by the doctest filters in list SHARDS_LIST. doctest reads
# only the last --test-case-exclude= it is given, so one in ARGS_LIST is merged into the shard's.
# A filter that matches nothing fails its shard (FAIL_REGULAR_EXPRESSION below), rather than
# passing on no test case while the cases it meant run in the last shard.
function(zrt_shard_args var k args_list shards_list)
  set(args "")
  set(excludes "")
  foreach(a IN LISTS ${args_list})
    if(a MATCHES "^--?(dt-)?(test-case-exclude|tce)=(.*)$")
      list(APPEND excludes "${CMAKE_MATCH_3}")
    elseif(a MATCHES "^--?(dt-)?(test-case|tc)=")
      message(FATAL_ERROR "SANITIZE_SHARDS with ${a} in ARGS: shard the program's cases by the "
                          "shards' filters alone")
    else()
      list(APPEND args "${a}")
    endif()
  endforeach()
  set(i 1)
  foreach(f IN LISTS ${shards_list})
    if(i LESS k)
      list(APPEND excludes "${f}")
    elseif(i EQUAL k)
      list(APPEND args "--test-case=${f}")
    endif()
    math(EXPR i "${i} + 1")
  endforeach()
  if(excludes)
    list(JOIN excludes "," e)
    list(APPEND args "--test-case-exclude=${e}")
  endif()
  set(${var} "${args}" PARENT_SCOPE)
endfunction()
set(ZRT_EMPTY_SHARD_REGEX "test cases: +0 \\|")

# zrt_sanitize_keep_optimized(TARGET): in the sanitizer tree, which compiles the test programs at
# -O0 (tests/CMakeLists.txt), TARGET keeps the tree's -O1: a test whose own code does the heavy
# arithmetic runs slower at -O0 than it compiles faster.
function(zrt_sanitize_keep_optimized target)
  if(ZRT_SANITIZE AND TARGET ${target})
    get_target_property(options ${target} COMPILE_OPTIONS)
    list(REMOVE_ITEM options "$<$<COMPILE_LANGUAGE:C,CXX>:-O0>")
    set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${options}")
  endif()
endfunction()

# zrt_test_program_needed(TARGET): TARGET, a program of zrt_add_test or zrt_add_mpi_test, is
# built with the tree even where ZRT_SANITIZED_ELSEWHERE leaves its own tests out: another test
# here runs it.
function(zrt_test_program_needed target)
  if(TARGET ${target})
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL FALSE)
  endif()
endfunction()

function(zrt_add_test)
  cmake_parse_arguments(T "CUDA" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;SANITIZE_SHARDS" ${ARGN})
  # The ThreadSanitizer build registers only the programs tests/CMakeLists.txt lists for it.
  if(ZRT_TSAN AND NOT T_NAME IN_LIST ZRT_TSAN_PROGRAMS)
    return()
  endif()
  zrt_test_timeout(T_TIMEOUT ${T_NAME})
  set(elsewhere "")
  if(ZRT_SANITIZED_ELSEWHERE AND NOT T_CUDA)
    set(elsewhere EXCLUDE_FROM_ALL)
  endif()
  add_executable(${T_NAME} ${elsewhere} ${T_SOURCES})
  if(T_CUDA)
    target_link_libraries(${T_NAME} PRIVATE zrt_cuda_test_main ${T_LIBS})
    list(APPEND T_LABELS cuda)
  else()
    target_link_libraries(${T_NAME} PRIVATE zrt_test_main ${T_LIBS})
  endif()
  zrt_target_defaults(${T_NAME})
  if(elsewhere)
    return()
  endif()
  if(ZRT_SANITIZE AND T_SANITIZE_SHARDS)
    set(T_ARGS "")
    list(LENGTH T_SANITIZE_SHARDS n)
    math(EXPR n "${n} + 1")
    foreach(k RANGE 1 ${n})
      zrt_shard_args(args ${k} T_ARGS T_SANITIZE_SHARDS)
      add_test(NAME ${T_NAME}_shard${k} COMMAND ${T_NAME} ${args})
      set_tests_properties(${T_NAME}_shard${k} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
                           ENVIRONMENT "${ZRT_TEST_ENV}" SKIP_RETURN_CODE 77
                           FAIL_REGULAR_EXPRESSION "${ZRT_EMPTY_SHARD_REGEX}")
    endforeach()
    return()
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
                       ENVIRONMENT "${ZRT_TEST_ENV}" SKIP_RETURN_CODE 77)
endfunction()

function(zrt_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;RANKS;LABELS;ARGS;SANITIZE_SHARDS" ${ARGN})
  zrt_test_timeout(T_TIMEOUT ${T_NAME})
  if(NOT T_RANKS)
    set(T_RANKS 1 2 4)
  endif()
  if(ZRT_TSAN)
    if(NOT T_NAME IN_LIST ZRT_TSAN_PROGRAMS)
      return()
    endif()
    # Under TSan (several times slower), 2 and 3 ranks: enough for every thread to meet MPI.
    list(FILTER T_RANKS INCLUDE REGEX "^[23]$")
  endif()
  # Under ASan + UBSan, no 4-rank run where a smaller multi-rank one exists: the release suite
  # runs every rank count, and 2 (and 3, the uneven shards) reach the same code under the
  # sanitizers. 4 ranks on CI's 2 cores cost the most wall time of that suite (the offload test's
  # reached its 120 s cap under load; docs/operations.md).
  if(ZRT_SANITIZE AND ("2" IN_LIST T_RANKS OR "3" IN_LIST T_RANKS))
    list(REMOVE_ITEM T_RANKS 4)
  endif()
  # Where the sanitizer tree runs the rest (ZRT_SANITIZED_ELSEWHERE), only the 4 ranks it leaves out.
  set(elsewhere "")
  if(ZRT_SANITIZED_ELSEWHERE)
    if("4" IN_LIST T_RANKS AND ("2" IN_LIST T_RANKS OR "3" IN_LIST T_RANKS))
      set(T_RANKS 4)
    else()
      set(T_RANKS "")
      set(elsewhere EXCLUDE_FROM_ALL)
    endif()
  endif()
  add_executable(${T_NAME} ${elsewhere} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE zrt_mpi_test_main ${T_LIBS})
  zrt_target_defaults(${T_NAME})
  # Under ASan + UBSan, a program whose whole run takes over a third of its cap there is split
  # into shards by test case (SANITIZE_SHARDS), each a test of its own: ctest runs them side by
  # side, no one of them nears the cap on a loaded machine, and together they run every case once.
  # The release suite runs the program whole.
  if(ZRT_SANITIZE AND T_SANITIZE_SHARDS)
    list(LENGTH T_SANITIZE_SHARDS n)
    math(EXPR n "${n} + 1")
    foreach(np ${T_RANKS})
      foreach(k RANGE 1 ${n})
        zrt_shard_args(args ${k} T_ARGS T_SANITIZE_SHARDS)
        set(t ${T_NAME}_np${np}_shard${k})
        add_test(NAME ${t}
                 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${ZRT_MPIEXEC_FLAGS}
                         ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS} ${args})
        set_tests_properties(${t} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "mpi;${T_LABELS}"
                             PROCESSORS ${np} ENVIRONMENT "${ZRT_TEST_ENV}" SKIP_RETURN_CODE 77
                             FAIL_REGULAR_EXPRESSION "${ZRT_EMPTY_SHARD_REGEX}")
      endforeach()
    endforeach()
    return()
  endif()
  foreach(np ${T_RANKS})
    add_test(NAME ${T_NAME}_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${ZRT_MPIEXEC_FLAGS}
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    set_tests_properties(${T_NAME}_np${np} PROPERTIES TIMEOUT ${T_TIMEOUT}
                         LABELS "mpi;${T_LABELS}" PROCESSORS ${np}
                         ENVIRONMENT "${ZRT_TEST_ENV}" SKIP_RETURN_CODE 77)
  endforeach()
endfunction()
