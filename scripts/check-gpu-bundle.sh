#!/usr/bin/env bash
# scripts/check-gpu-bundle.sh BUNDLE_TAR [ROOT] — proves the GPU bundle self-contained, here:
# unpacks it into a minimal Debian 12 root (debootstrap --variant=minbase, then python3 and
# python3-torch only: none of ZRT's build or development packages; made at ROOT, default
# /work/minroot, when absent) and, chrooted there, runs every part of scripts/gpu-check.sh
# --bundle that needs no GPU: the bundle's libraries check, the Engine's, trainer's and Python
# package's tests on the host device, zrt-train on host-strict on 2 ranks. Then it takes one
# library the root lacks (liburing) out of the bundle and checks that the libraries check fails
# naming it. Not in CI: building the bundle is a second full CUDA build (docs/operations.md);
# run it before every change to the GPU path. Needs root (chroot, bind mounts).
set -euo pipefail
tarball=$(realpath "${1:?usage: scripts/check-gpu-bundle.sh BUNDLE_TAR [ROOT]}")
root=$(realpath -m "${2:-/work/minroot}")
if [ ! -x "$root/usr/bin/python3" ]; then
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian
  chroot "$root" apt-get install -y --no-install-recommends python3 python3-torch
fi
if chroot "$root" dpkg -l 2>/dev/null | grep -qE '^ii +(libopenmpi|liburing|libnccl|nlohmann|doctest|libboost)'; then
  echo "check-gpu-bundle: $root holds ZRT's build packages; it must be a minimal root" >&2
  exit 1
fi
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount "$m" || true; done; }
trap cleanup EXIT
for m in proc sys dev; do
  if ! mountpoint -q "$root/$m"; then mount --bind "/$m" "$root/$m"; mounted=("$root/$m" "${mounted[@]}"); fi
done
rm -rf "$root/opt/zrt-gpu-bundle" "$root/opt/gpu-check-out"
tar -C "$root/opt" -xJf "$tarball"
echo "check-gpu-bundle: the parts that need no GPU, in $root"
status=0
chroot "$root" bash /opt/zrt-gpu-bundle/src/scripts/gpu-check.sh --bundle /opt/zrt-gpu-bundle --no-gpu \
  /opt/gpu-check-out || status=1
echo "check-gpu-bundle: the same bundle without liburing.so.2 must fail, naming it"
mv "$root/opt/zrt-gpu-bundle/lib/liburing.so.2" "$root/opt/liburing.so.2.aside"
if chroot "$root" bash /opt/zrt-gpu-bundle/src/scripts/gpu-check.sh --bundle /opt/zrt-gpu-bundle --no-gpu \
     --libraries-only /opt/gpu-check-missing >/dev/null 2>&1 ||
   ! grep -q 'needs liburing.so.2' "$root/opt/gpu-check-missing/libraries.log"; then
  echo "check-gpu-bundle: with liburing.so.2 left out, the libraries check did not fail naming it" >&2
  status=1
else
  grep -m3 'liburing.so.2' "$root/opt/gpu-check-missing/libraries.log"
fi
mv "$root/opt/liburing.so.2.aside" "$root/opt/zrt-gpu-bundle/lib/liburing.so.2"
echo "check-gpu-bundle: $([ "$status" = 0 ] && echo passed || echo FAILED); logs in $root/opt/gpu-check-out"
exit "$status"
