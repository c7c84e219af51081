#!/usr/bin/env bash
# floors_test.sh SOURCE_DIR — no folder includes one above it (docs/architecture.md):
#   core/ < comm/, offload/ (each on core only) < partition/ < runtime/ < tools/, python/
# A library folder may include its own headers and those of the floors below; tools/ and python/
# (the zrt package's bindings) may use any library folder. Fails naming every include that reaches up or sideways.
set -euo pipefail
src=$1
declare -A allowed=(
  [core]="core"
  [comm]="core comm"
  [offload]="core offload"
  [partition]="core comm offload partition"
  [runtime]="core comm offload partition runtime"
)
bad=0
for folder in "${!allowed[@]}"; do
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(sed -E 's/.*#include "([^/"]+)\/.*/\1/' <<<"$line")
    case " ${allowed[$folder]} " in
      *" $target "*) ;;
      *)
        if [ -d "$src/$target" ] && [ "$target" != tests ]; then
          echo "floors: $file includes $target/ (a $folder/ file may include only: ${allowed[$folder]})"
          bad=1
        fi
        ;;
    esac
  done < <(cd "$src" && grep -rn --include='*.h' --include='*.cpp' --include='*.cu' '#include "[^/"]*/' "$folder" || true)
done
[ "$bad" = 0 ] && echo "floors: every include stays on its floor or below"
exit "$bad"
