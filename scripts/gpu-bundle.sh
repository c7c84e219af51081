#!/usr/bin/env bash
# scripts/gpu-bundle.sh OUT_DIR — builds here, with this machine's CUDA 13 nvcc, everything the
# GPU check runs, and packs it with every shared library it loads into OUT_DIR/zrt-gpu-bundle.tar.xz
# (docs/operations.md, "The GPU bundle"). The GPU machine has the driver and a python3 with torch
# (cu130) and nothing else: no compilers' packages, no Open MPI, no network, 64 MiB carried in.
#   - Programs: the zrt-* tools and benches, the tests labelled `cuda`, the Engine's tests on the
#     host device, the trainer's and the Python package's tests (scripts/gpu_bundle_manifest.py
#     lists them with their commands), all for sm_90 with PTX, stripped of debug sections.
#   - The `zrt` package with its extension for CPython 3.12 (the GPU machine's) and 3.11 (Debian
#     12's, for the minimal-root check, scripts/check-gpu-bundle.sh).
#   - lib/: the ldd closure of all of the above except glibc, libstdc++/libgcc and the driver.
#     libnccl and libcublas are not in it: they are 760 MB, ZRT opens them at first use, and the
#     GPU machine's torch wheels carry them (scripts/gpu-check.sh --bundle finds them there).
#   - Open MPI's launcher, daemon, plugins and help files, relocated by env.sh (OPAL_PREFIX and
#     friends; the plm `isolated`, since the GPU machine has no ssh). Plugins for fabrics the
#     machine has not (UCX, libfabric, verbs, PSM) and OpenSHMEM's are left out, with their libraries.
# Env: ZRT_BUNDLE_BUILD (build tree, default build-bundle), ZRT_BUNDLE_PYTHON (CPython 3.12,
# default pyenv's).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:?usage: scripts/gpu-bundle.sh OUT_DIR}")
build=$(realpath -m "${ZRT_BUNDLE_BUILD:-$root/build-bundle}")
py312=${ZRT_BUNDLE_PYTHON:-}
if [ -z "$py312" ]; then
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 "$(command -v python3.12)"; do
    if [ -x "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then py312=$c; break; fi
  done
fi
[ -n "$py312" ] || { echo "gpu-bundle: no CPython 3.12 found (set ZRT_BUNDLE_PYTHON)" >&2; exit 1; }
export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null || { echo "gpu-bundle: nvcc not found: the bundle is a CUDA build" >&2; exit 1; }

# 1. The builds. pybind11 for 3.12 comes from PyPI into a venv beside the tree (Debian's
#    pybind11-dev is for its own 3.11, which the second tree uses; it builds the extension only).
if [ ! -x "$build-py312/bin/python" ]; then
  "$py312" -m venv "$build-py312"
  "$build-py312/bin/pip" install -q pybind11
fi
cuda_args=(-DZRT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DZRT_BUILD_PYTHON=ON)
bash "$root/scripts/build.sh" "$build" "${cuda_args[@]}" -DPython_EXECUTABLE="$build-py312/bin/python" \
  -Dpybind11_DIR="$("$build-py312/bin/python" -m pybind11 --cmakedir)"
ZRT_BUILD_TARGETS=_zrt bash "$root/scripts/build.sh" "$build-cp311" "${cuda_args[@]}" \
  -DPython_EXECUTABLE=/usr/bin/python3

# 2. The tree: B/build mirrors the build tree's layout, B/src the sources the tests read.
stage="$out/zrt-gpu-bundle"
rm -rf "$stage"
mkdir -p "$stage"/{bin,lib,share,etc,build/python,src/scripts}
(cd "$build" && ctest --show-only=json-v1) >"$out/ctest.json"
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
place() {  # place SRC DST: copies a file (ELF stripped of debug sections) or a source folder
  if [ -d "$1" ]; then
    mkdir -p "$2"
    case "$2" in "$stage"/src/*) cp -r "$1/." "$2/" ;; esac
  elif [ -f "$1" ]; then
    mkdir -p "$(dirname "$2")"
    cp "$1" "$2"
    if is_elf "$2"; then strip --strip-debug "$2"; fi
  fi
}
/usr/bin/python3 "$root/scripts/gpu_bundle_manifest.py" "$out/ctest.json" "$build" "$root" \
  "$stage/manifest.json" | while read -r p; do
  case "$p" in
    @B@/build/*) place "$build/${p#@B@/build/}" "$stage/${p#@B@/}" ;;
    @B@/src/*) place "$root/${p#@B@/src/}" "$stage/${p#@B@/}" ;;
  esac
done
find "$build/tools" -type f -executable -name 'zrt-*' | while read -r t; do
  place "$t" "$stage/build/${t#"$build"/}"
  ln -sf "../build/${t#"$build"/}" "$stage/bin/$(basename "$t")"
done
cp -r "$build/python/zrt" "$stage/build/python/"
cp "$build-cp311"/python/zrt/_zrt.cpython-311*.so "$stage/build/python/zrt/"
find "$stage/build/python" -name '*.so' -exec strip --strip-debug {} +
for d in configs tests/support tests/python tests/tools; do place "$root/$d" "$stage/src/$d"; done
cp "$root/README.md" "$stage/src/"  # python_readme_script_test runs the README's script
cp "$root"/scripts/{gpu-check.sh,gpu_bundle_tests.py,gpu_figures.py} "$stage/src/scripts/"
cp /usr/share/common-licenses/GPL-3 "$stage/share/train.txt"  # zrt-train's default text

# 3. Open MPI (Debian's 4.1 with its external PMIx), relocated.
ompi=/usr/lib/x86_64-linux-gnu/openmpi/lib
cp /usr/bin/orterun /usr/bin/orted "$stage/bin/"
ln -s orterun "$stage/bin/mpirun"
cp -r "$ompi/openmpi3" "$stage/lib/openmpi3"
cp -r /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix "$stage/lib/pmix"
cp -r /usr/share/openmpi "$stage/share/openmpi"
# OpenSHMEM's frameworks go too: ZRT is MPI only.
rm -f "$stage"/lib/openmpi3/mca_{atomic,memheap,scoll,spml,sshmem}_*.so
for p in "$stage"/lib/openmpi3/*.so; do
  if grep -qE 'lib(ucp|ucs|uct|fabric|ibverbs|psm|psm2|infinipath|rdmacm|mca_common_ofi)\.so' <(ldd "$p"); then
    echo "gpu-bundle: left out $(basename "$p") (a fabric the GPU machine has not)" >>"$out/bundle.log"
    rm "$p"
  fi
done
cat >"$stage/env.sh" <<'EOF'
# Sourced by scripts/gpu-check.sh --bundle: makes the bundle's programs find their libraries and
# Open MPI find its plugins and help files wherever the bundle was unpacked.
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$B/bin:$PATH" LD_LIBRARY_PATH="$B/lib${ZRT_EXTRA_LIBRARY_PATH:+:$ZRT_EXTRA_LIBRARY_PATH}"
export OPAL_PREFIX="$B" OPAL_LIBDIR="$B/lib" OPAL_DATADIR="$B/share" OPAL_SYSCONFDIR="$B/etc"
export OMPI_MCA_mca_base_component_path="$B/lib/openmpi3" PMIX_MCA_mca_base_component_path="$B/lib/pmix"
export OMPI_MCA_plm=isolated OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH="$B/build/python:$B/src/tests/python${PYTHONPATH:+:$PYTHONPATH}"
EOF

# 4. The closure. ldd resolves transitively; what it cannot find fails the bundle here.
excluded='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libnvidia-[a-z-]+)\.so'
from_torch='^lib(nccl|cublas|cublasLt)\.so'
elves=$(find "$stage" -type f | while read -r f; do if is_elf "$f"; then echo "$f"; fi; done)
status=0
for f in $elves; do
  if readelf -d "$f" | grep NEEDED | grep -E 'lib(nccl|cublas|cublasLt)\.so' >/dev/null; then
    echo "gpu-bundle: ${f#"$stage"/} needs NCCL or cuBLAS at load time; ZRT opens them at first use" >&2
    status=1
  fi
done
for f in $elves; do
  ldd "$f" 2>/dev/null | awk '$2 == "=>" {print $1, $3}'
done | sort -u >"$out/closure.txt"
while read -r name path; do
  if [[ $name =~ $excluded || $name =~ $from_torch ]]; then continue; fi
  if [ "$path" = "not" ]; then echo "gpu-bundle: $name not found on this machine" >&2; status=1; continue; fi
  [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
done <"$out/closure.txt"
[ "$status" = 0 ] || exit 1

# 5. Packed: xz's 64 MiB dictionary sees the statically linked programs' common code once.
tar -C "$out" -cf - zrt-gpu-bundle | xz -9 -T1 >"$out/zrt-gpu-bundle.tar.xz"
echo "gpu-bundle: $(du -sh "$stage" | cut -f1) unpacked, $(du -h "$out/zrt-gpu-bundle.tar.xz" | cut -f1) packed:" \
  "$out/zrt-gpu-bundle.tar.xz"
