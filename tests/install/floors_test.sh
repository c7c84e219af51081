#!/usr/bin/env bash
# floors_test.sh SOURCE_DIR — no folder includes one above it (docs/architecture.md):
#   core/ < comm/, offload/ (each on core only) < partition/ < runtime/ < tools/, python/
# A library folder may include its own headers and those of the floors below; tools/ and python/
# (the zrt package's bindings) may use any library folder. Inside a library floor the same holds
# for sub-folders: a file may include headers of its own folder, of the folders above it on its path (comm/mpi/shm/ may include
# comm/mpi/ and comm/) and of the folders below it (comm/mpi/ may include comm/mpi/shm/, a part
# of it), never of a sibling or cousin (comm/threads/ may not include comm/mpi/): a part two
# folders share belongs in their common parent. Fails naming every include that reaches up or
# sideways.
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
# Sub-folders of one floor: only along the folder's own path.
for folder in "${!allowed[@]}"; do
  while IFS= read -r line; do
    file=${line%%:*}
    dir=$(dirname "$file")
    header=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")
    target=$(dirname "$header")
    case "$dir/" in "$target/"*) continue ;; esac  # its own folder or one above it
    case "$target/" in "$dir/"*) continue ;; esac  # a folder below it
    echo "floors: $file includes $header (sideways: $target/ is neither above nor below $dir/)"
    bad=1
  done < <(cd "$src" && grep -rn --include='*.h' --include='*.cpp' --include='*.cu' "#include \"$folder/" "$folder" || true)
done
[ "$bad" = 0 ] && echo "floors: every include stays on its floor or below, and on its folder's path"
exit "$bad"
