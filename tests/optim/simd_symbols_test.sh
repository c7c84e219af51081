#!/usr/bin/env bash
# simd_symbols_test.sh "OBJECTS" (zrt_runtime's object files, ';'-separated)
# The AVX2 and AVX-512 objects are compiled with wider instruction sets than the rest of the
# library. If either defined an externally visible symbol besides its entry points (a weak
# inline function or template instance from a header, say), the linker could pick that copy
# for the whole program and run AVX-512 code on a processor without it. Checks that they don't.
set -euo pipefail
IFS=';' read -ra objs <<<"$1"
found=0
for o in "${objs[@]}"; do
  case "$o" in
    *kernels_avx2.cpp.o | *kernels_avx512.cpp.o) ;;
    *) continue ;;
  esac
  found=$((found + 1))
  entry=' T zrt::optim::detail::(adam|sgd|roofline|toFloat|fromFloat)Avx(2|512)\('
  # clang's UBSan (-fsanitize=function, the sanitizer tree) emits weak type descriptions of the
  # entry points' function types: data the same in every object, no code of any instruction set.
  typeinfo=' V typeinfo (name )?for void \('
  extra=$(nm -C --defined-only --extern-only "$o" | grep -vE "$entry" | grep -vE "$typeinfo" || true)
  if [ -n "$extra" ]; then
    echo "FAIL: $o defines externally visible symbols besides its entry points:"
    echo "$extra"
    exit 1
  fi
  echo "$o: $(nm -C --defined-only --extern-only "$o" | grep -cE "$entry") entry points, nothing else"
done
if [ "$found" != 2 ]; then
  echo "FAIL: expected the AVX2 and AVX-512 kernel objects among the arguments, found $found"
  exit 1
fi
