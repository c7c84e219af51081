#!/usr/bin/env bash
# zrt-io end to end, small and quick: every mode with --verify, the swap pattern, a sweep with
# JSON/CSV/plot output, --tune's aio section, --filename, --progress, and bad flags exiting 2.
# Usage: zrt_io_test.sh ZRT_IO_BINARY
set -euo pipefail
zio=$1
py=/usr/bin/python3
[ -x "$py" ] || py=python3
dir=$(mktemp -d "${TMPDIR:-/tmp}/zrt-io-test-XXXXXX")
prog=$(mktemp -d "${TMPDIR:-/tmp}/zrt-io-progress-XXXXXX")  # stderr captures, kept out of $dir
trap 'rm -rf "$dir" "$prog"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Every byte written and read back is checked, in each mode, O_DIRECT and buffered, 2 files.
for mode in read write rw; do
  "$zio" --path "$dir" --size 8M --block-size 256K --queue-depth 4 --threads 2 --files 2 \
    --mode "$mode" --verify --quiet >/dev/null || fail "--verify --mode $mode"
done
"$zio" --path "$dir" --size 4M --block-size 64K --mode write --buffered --verify --quiet \
  >/dev/null || fail "--verify --buffered"
"$zio" --path "$dir" --size 4M --block-size 64K --engine threads --mode rw --verify --quiet \
  >/dev/null || fail "--verify --engine threads"
# Requests smaller than a ring's fill (each ring holds pieces of several), and a chosen count
# of them outstanding, down to one at a time.
for n in 0 1 7; do
  "$zio" --path "$dir" --size 4M --block-size 64K --queue-depth 4 --request-size 192K \
    --requests "$n" --mode rw --verify --quiet >/dev/null || fail "--request-size 192K --requests $n"
done

# JSON lines carry the documented keys; bytes and GB/s agree with seconds.
out=$("$zio" --path "$dir" --size 8M --block-size 1M,2M --queue-depth 2,4 --mode read,write \
        --sweep --json --plot "$dir/plot.svg")
echo "$out" | "$py" -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin if l.strip()]
assert len(lines) == 8, len(lines)
for j in lines:
    for k in ("mode", "block_size", "queue_depth", "threads", "bytes", "seconds", "gbps",
              "iops", "p50_us", "p99_us", "mean_in_flight"):
        assert k in j, k
    assert j["bytes"] == 8 << 20, j
    assert abs(j["gbps"] - j["bytes"] / j["seconds"] / 1e9) < 1e-6 * max(1, j["gbps"]), j
    # Slots held on average: never more than the rings have.
    assert 0 < j["mean_in_flight"] <= j["queue_depth"] * j["threads"] + 1e-9, j
assert {(j["mode"], j["block_size"], j["queue_depth"]) for j in lines} == {
    (m, b, q) for m in ("read", "write") for b in (1 << 20, 2 << 20) for q in (2, 4)}
' || fail "--json output"
grep -q "<svg" "$dir/plot.svg" && grep -q "polyline" "$dir/plot.svg" || fail "--plot"
[ -z "$(ls "$dir" | grep -v plot.svg)" ] || fail "private files left behind: $(ls "$dir")"

# --duration: runs for the time asked (wrapping around the file), not for a byte count.
"$zio" --path "$dir" --size 4M --block-size 256K --mode rw --duration 0.5 --json | "$py" -c '
import json, sys
j = json.loads(sys.stdin.readline())
assert 0.5 <= j["seconds"] < 5 and j["bytes"] > 0, j
assert j["read_gbps"] > 0 and j["write_gbps"] > 0, j
' || fail "--duration"

# CSV: a header and one row per setting.
n=$("$zio" --path "$dir" --size 4M --block-size 1M --queue-depth 2,4 --sweep --csv | wc -l)
[ "$n" -eq 3 ] || fail "--csv gave $n lines"

# The human table is sorted best first.
"$zio" --path "$dir" --size 4M --block-size 256K,1M --sweep --quiet | "$py" -c '
import sys
rows = [l.split() for l in sys.stdin if l.strip() and l.split()[0][-1] in "KM"]
gbps = [float(r[5]) for r in rows]
assert len(gbps) == 2 and gbps == sorted(gbps, reverse=True), gbps
' || fail "table order"

# --tune prints a DeepSpeed aio section.
"$zio" --path "$dir" --size 4M --tune --block-size 256K,1M --queue-depth 2 --threads 1 --quiet \
  | "$py" -c '
import json, sys
aio = json.load(sys.stdin)["aio"]
assert aio["block_size"] in (256 << 10, 1 << 20) and aio["queue_depth"] == 2, aio
assert aio["intra_op_parallelism"] == 1 and aio["single_submit"] is False, aio
' || fail "--tune"

# The swap pattern, verified, with its step latencies.
"$zio" --path "$dir" --pattern swap --ranks 2 --size 4M --tile-size 1M --block-size 256K \
  --verify --json | "$py" -c '
import json, sys
j = json.loads(sys.stdin.readline())
assert j["mode"] == "swap" and j["ranks"] == 2, j
assert j["bytes"] == 2 * 2 * 3 * (4 << 20), j  # ranks x (read + write) x 3 states x size
assert j["step_p50_ms"] > 0 and j["verify_errors"] == 0, j
' || fail "--pattern swap"

# --filename: created, laid out and kept; a second run reuses it.
"$zio" --filename "$dir/named.dat" --size 2M --quiet >/dev/null || fail "--filename"
[ "$(stat -c %s "$dir/named.dat")" -ge $((2 << 20)) ] || fail "--filename size"
"$zio" --filename "$dir/named.dat" --size 2M --verify --quiet >/dev/null || fail "--filename reuse"

# --config: the aio section is the setting, its nvme_path the directory; flags override it.
cat >"$dir/ds.json" <<JSON
{"train_batch_size": 8,
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "$dir"}},
 "aio": {"block_size": "256K", "queue_depth": 4, "intra_op_parallelism": 2}}
JSON
"$zio" --config "$dir/ds.json" --size 4M --json --queue-depth 6 | "$py" -c '
import json, sys
j = json.loads(sys.stdin.readline())
assert (j["block_size"], j["queue_depth"], j["threads"]) == (256 << 10, 6, 2), j
' || fail "--config"
echo '{"aio": {"blok_size": 1}}' >"$dir/bad.json"

# --progress on, into a file: the bar rewritten in place (carriage return, erase to end of line),
# both settings started and ended, a step within a timed run; one newline at the end.
"$zio" --path "$dir" --size 4M --block-size 256K --queue-depth 2,4 --sweep --json --progress on \
  2>"$prog/on.txt" >/dev/null || fail "--progress on (sweep)"
"$zio" --path "$dir" --size 4M --block-size 256K --mode rw --duration 0.6 --json --progress on \
  2>"$prog/timed.txt" >/dev/null || fail "--progress on (--duration)"
"$py" - "$prog" <<'PY' || fail "--progress on"
import re, sys
d = sys.argv[1]
text = open(d + "/on.txt", newline="").read()  # no newline translation: \r stays
bars = [b for b in text.split("\r\x1b[K") if b.startswith("[")]
assert len(bars) >= 4 and text.endswith("\n"), repr(text)
assert re.match(r"\[\.{30}\] 0/2 read bs 256.00 KiB qd 2 threads 1", bars[0]), bars[0]
assert re.match(r"\[#{30}\] 2/2 read bs 256.00 KiB qd 4 threads 1: \d+\.\d\d GB/s\n$", bars[-1]), bars[-1]
# Between bars no newline: one line rewritten, not a line each.
assert all("\n" not in b for b in bars[:-1]), bars
timed = open(d + "/timed.txt", newline="").read()
steps = re.findall(r"\r\x1b\[K\[[#.]{30}\] 0/1 rw [^\r\n]* (\d+)%", timed)
assert steps and all(0 <= int(p) < 100 for p in steps), repr(timed)
PY
# --progress off, and auto into a file (not a terminal): plain lines as each setting starts and
# ends, no carriage return or escape.
for mode in off auto; do
  "$zio" --path "$dir" --size 4M --block-size 256K --queue-depth 2,4 --sweep --json \
    --progress "$mode" 2>"$prog/$mode.txt" >/dev/null || fail "--progress $mode"
  "$py" - "$prog/$mode.txt" <<'PY' || fail "--progress $mode"
import re, sys
text = open(sys.argv[1], newline="").read()
assert "\r" not in text and "\x1b" not in text, repr(text)
bars = [l for l in text.splitlines() if l.startswith("[")]
assert len(bars) == 4, bars
assert re.fullmatch(r"\[\.{30}\] 0/2 read bs 256.00 KiB qd 2 threads 1", bars[0]), bars
assert re.fullmatch(r"\[#{15}\.{15}\] 1/2 read bs 256.00 KiB qd 2 threads 1: \d+\.\d\d GB/s", bars[1]), bars
assert re.fullmatch(r"\[#{30}\] 2/2 read bs 256.00 KiB qd 4 threads 1: \d+\.\d\d GB/s", bars[3]), bars
PY
done
# --quiet wins: nothing on stderr.
"$zio" --path "$dir" --size 4M --block-size 256K --progress on --quiet 2>"$prog/quiet.txt" >/dev/null
[ ! -s "$prog/quiet.txt" ] || fail "--quiet --progress on printed: $(cat "$prog/quiet.txt")"

# Bad input: a message and exit status 2.
expect2() {
  set +e
  msg=$("$zio" "$@" 2>&1 >/dev/null)
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "'$*' exited $rc, not 2"
  [ -n "$msg" ] || fail "'$*' printed no message"
}
expect2 --path "$dir" --size 4M --mode sideways
expect2 --path "$dir" --size lots
expect2 --path "$dir" --size 4M --queue-depth 0
expect2 --path "$dir" --size 4M --block-size 100
expect2 --path "$dir" --size 4M --no-such-flag
expect2 --size 4M
expect2 --path "$dir" --size 4M --block-size 1M,2M
expect2 --path "$dir" --size 4M --json --csv
expect2 --path "$dir" --size 4M --progress sometimes
expect2 --path /nonexistent/zrt --size 4M
expect2 --filename /nonexistent/zrt/file --size 4M
expect2 --filename "$dir" --size 4M
expect2 --config "$dir/bad.json" --path "$dir" --size 4M
expect2 --config "$dir/missing.json" --path "$dir" --size 4M
# The engine takes 512-byte blocks, but --tune's aio section must load as a config.
"$zio" --path "$dir" --size 4M --block-size 512 --quiet >/dev/null || fail "--block-size 512"
expect2 --path "$dir" --size 4M --tune --block-size 512,4K
echo "zrt-io: all checks passed"
