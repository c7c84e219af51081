#!/usr/bin/env python3
"""zrt-train's live metrics, --save-on-signal and comm timeout on two ranks (docs/metrics.md).

  check_live.py --mode metrics --configs DIR -- MPIEXEC... ZRT_TRAIN
      A stage-2 run with --metrics-port on a free loopback port: the endpoint is scraped with
      urllib while the job runs. Both ranks' lines are there, once per metric a HELP and a TYPE,
      the step count grows between two scrapes, losses are finite and equal to the step's logged
      loss, busbw equals the counters times nccl-tests' factor, the oldest collective wait is
      non-negative (0 exactly when none), no NVMe engine lines without NVMe offload, and the ledger's
      parameter and optimizer-state bytes equal rank 0's memory table
      printed at the end (the run is stopped by SIGUSR1 with --save-on-signal after the second
      scrape, so its length does not depend on the machine's speed). A port already taken: exit 2 before training, naming address:port.
  check_live.py --mode signal --configs DIR -- MPIEXEC... ZRT_TRAIN
      A stage-3 NVMe-offload run (its nvme_path a temporary directory) with --save-on-signal
      (the first also serves metrics: after three steps each rank's NVMe bytes are positive, its
      queue in use within the engine's capacity, its oldest waits non-negative):
      SIGTERM to one rank only after a few steps (as a scheduler's signal may reach the ranks at
      different times); the job says where it stopped, exits 3, leaves the checkpoint of that
      step and no swap file; --resume from it logs the next step first. Then the same with
      SIGUSR1 sent to mpirun, which forwards it to every rank. (SIGTERM to Open MPI 4.1's mpirun
      does not work: it stops relaying the ranks' output at once, so rank 0 blocks writing its
      step line, and it sends SIGTERM to the ranks only after odls_base_sigkill_timeout; see
      docs/metrics.md.)
  check_live.py --mode timeout --configs DIR -- MPIEXEC... ZRT_TRAIN
      zrt.comm_timeout_s governs zrt-train's communicator: a stage-2 run whose config says 3 s,
      with ZRT_COMM_TIMEOUT_S unset, and rank 1 stopped by SIGSTOP after a few steps, ends with
      the watchdog's report ("collective timeout ... (timeout 3.0 s)") and a non-zero exit within
      30 s of the stop (the default of 600 s would not end it for ten minutes).

MPIEXEC... is the mpirun command line up to (not including) the rank count. Exit 0 pass, 1 fail.
"""
import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

TINY = ["--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "32"]


def fail(msg, out=""):
    if out:
        print(out)
    raise SystemExit(f"FAIL: {msg}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, what, proc, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            fail(f"the job ended (exit {proc.returncode}) before {what}", proc.stdout.read())
        time.sleep(0.05)
    proc.kill()
    fail(f"timed out after {timeout} s waiting for {what}", proc.stdout.read())


def scrape(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            if r.status != 200:
                fail(f"/metrics answered {r.status}")
            return r.read().decode()
    except OSError:
        return None  # not listening yet


def samples(text):
    """{(name, frozenset(labels)): value} of a Prometheus text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
        if not m:
            fail(f"not a Prometheus sample line: {line!r}")
        labels = frozenset(re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def get(s, name, **labels):
    key = (name, frozenset(labels.items()))
    if key not in s:
        fail(f"no sample {name}{labels}")
    return s[key]


def steps_done(text):
    if not text:
        return 0
    s = samples(text)
    return get(s, "zrt_steps_total", rank="0")


def metrics(a):
    port = free_port()
    steps = 100000
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "log.jsonl")
        cmd = a.mpiexec + ["-np", "2", a.trainer, "--config", os.path.join(a.configs, "stage2.json"),
                           "--steps", str(steps), "--progress", "off", "--eval-every", "0",
                           "--json-log", log, "--metrics-port", str(port),
                           "--save-dir", os.path.join(work, "save"), "--save-on-signal"] + TINY
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = wait_for(lambda: (lambda t: t if steps_done(t) >= 1 else None)(scrape(port)),
                         "a first report on /metrics", p)
        n1 = steps_done(first)
        second = wait_for(lambda: (lambda t: t if t and steps_done(t) > n1 else None)(scrape(port)),
                          "the step count to grow", p)
        p.send_signal(signal.SIGUSR1)
        out, _ = p.communicate(timeout=120)
        if p.returncode != 3:
            fail(f"exit {p.returncode}: {' '.join(cmd)}", out)
        if f"metrics: http://127.0.0.1:{port}/metrics" not in out:
            fail("the trainer did not print where its metrics are", out)
        with open(log) as f:
            losses = {r["step"]: r["loss"] for r in map(json.loads, f) if "step" in r}  # the last line is the ledger
        for text in (first, second):
            for name in re.findall(r"^# TYPE (\S+)", text, re.M):
                if text.count(f"# TYPE {name} ") != 1 or text.count(f"# HELP {name} ") != 1:
                    fail(f"{name}: not exactly one HELP and one TYPE line")
            s = samples(text)
            n = get(s, "zrt_steps_total", rank="0")
            for r in ("0", "1"):
                if get(s, "zrt_steps_total", rank=r) != n:
                    fail(f"rank {r} reports another step count than rank 0")
                loss = get(s, "zrt_loss", rank=r)
                # The loss every rank reports is the mean over ranks the log records.
                if not math.isfinite(loss) or abs(loss - losses[int(n)]) > 1e-9 * abs(loss):
                    fail(f"rank {r} loss {loss} at step {n}, the log says {losses[int(n)]}")
                if get(s, "zrt_step_seconds", rank=r) <= 0 or get(s, "zrt_loss_scale", rank=r) != 1:
                    fail(f"rank {r}: step time not positive or loss scale not 1 in fp32")
                if get(s, "zrt_collective_bytes_total", rank=r, op="allGather") <= 0:
                    fail(f"rank {r}: no all-gather bytes")
                check_comm_live(s, r)
            engine = [n for n, k in s if n in IO_ENGINE_METRICS or ("source", "io") in k]
            if engine:
                fail(f"NVMe engine metrics in a run without NVMe offload: {sorted(set(engine))}")
        print(f"scraped steps {int(n1)} then {int(steps_done(second))}; both ranks present")
        # The table rank 0 prints at the end; its parameter and optimizer-state rows do not change
        # after set-up, so the scraped bytes must equal them.
        table = out[out.index("rank 0 memory:"):]
        s = samples(second)
        for tag in ("parameters", "optimizer state"):
            row = next((l for l in table.splitlines() if re.match(r"\|\s*" + tag + r"\s+\|", l)), None)
            if row is None:
                fail(f"no '{tag}' row in rank 0's memory table", table)
            scraped = get(s, "zrt_memory_bytes", rank="0", tag=tag, place="device")
            print(f"{tag}: scraped {int(scraped)} bytes on device; table row: {row.strip()}")
            if scraped <= 0 or not table_matches(row, scraped):
                fail(f"{tag}: scraped {scraped} bytes, the table says {row.strip()}", table)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = a.mpiexec + ["-np", "2", a.trainer, "--config", os.path.join(a.configs, "stage2.json"),
                           "--steps", "2", "--progress", "off", "--metrics-port", str(port)] + TINY
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        want = f"metrics endpoint 127.0.0.1:{port}: cannot bind"
        if r.returncode != 2 or want not in r.stderr or "step 1/" in r.stdout:
            fail(f"a taken port: exit {r.returncode}, want 2 before training with '{want}'", r.stdout + r.stderr)
        print(f"a taken port: exit 2, '{want}'")


# Served only with an NVMe engine (zrt_io_wait_seconds, the step's wait on NVMe, always is).
IO_ENGINE_METRICS = {"zrt_io_bytes_total", "zrt_io_gbps", "zrt_io_queue_capacity", "zrt_io_transfers_in_flight",
                     "zrt_io_transfers_in_flight_max", "zrt_io_requests_outstanding"}


def one(s, name, **labels):
    """The value of the one sample of `name` whose labels include `labels`, and its labels."""
    found = [(dict(k), v) for (n, k), v in s.items() if n == name and set(labels.items()) <= k]
    if len(found) != 1:
        fail(f"{len(found)} samples of {name}{labels}, want 1")
    return found[0][1], found[0][0]


def check_comm_live(s, r):
    """Rank r's busbw and oldest collective wait (docs/metrics.md)."""
    ops = sorted(dict(k)["op"] for (n, k) in s if n == "zrt_collective_calls_total" and ("rank", r) in k)
    if "allGather" not in ops:
        fail(f"rank {r}: no all-gather counted (the metrics gather is one)")
    for op in ops:
        # busbw follows from the counters with nccl-tests' factor on 2 ranks: 2(n-1)/n = 1 for
        # all-reduce, (n-1)/n = 1/2 for reduce-scatter and all-gather, 1 broadcast, 0 barrier.
        busbw = get(s, "zrt_collective_busbw_gbps", rank=r, op=op)
        factor = {"allReduce": 1.0, "reduceScatter": 0.5, "allGather": 0.5, "broadcast": 1.0, "barrier": 0.0}[op]
        if factor == 0:
            continue
        want = get(s, "zrt_collective_bytes_total", rank=r, op=op) / \
            get(s, "zrt_collective_seconds_total", rank=r, op=op) / 1e9 * factor
        if not busbw > 0 or abs(busbw - want) > 1e-9 * want:
            fail(f"rank {r}: {op} busbw {busbw} GB/s, the counters give {want}")
    print(f"rank {r}: busbw for {', '.join(ops)} equals bytes / seconds x factor")
    wait, labels = one(s, "zrt_oldest_wait_seconds", rank=r, source="comm")
    if not (wait >= 0 and math.isfinite(wait)) or (labels["op"] == "none") != (wait == 0):
        fail(f"rank {r}: oldest collective wait {wait} s for op {labels['op']}")


def check_io_live(s, r):
    """Rank r's NVMe engine figures in an NVMe-offload run, after a few steps."""
    for d in ("read", "write"):
        if not get(s, "zrt_io_bytes_total", rank=r, dir=d) > 0:
            fail(f"rank {r}: no NVMe {d} bytes after three steps")
        if not get(s, "zrt_io_gbps", rank=r, dir=d) >= 0:
            fail(f"rank {r}: negative NVMe {d} rate")
    cap = get(s, "zrt_io_queue_capacity", rank=r)
    now = get(s, "zrt_io_transfers_in_flight", rank=r)
    most = get(s, "zrt_io_transfers_in_flight_max", rank=r)
    if not (cap >= 1 and 0 <= now <= most <= cap and most >= 1):
        fail(f"rank {r}: queue in use {now}, most {most}, capacity {cap}")
    outstanding = get(s, "zrt_io_requests_outstanding", rank=r)
    wait, labels = one(s, "zrt_oldest_wait_seconds", rank=r, source="io")
    if outstanding < 0 or wait < 0 or (labels["op"] == "none") != (outstanding == 0):
        fail(f"rank {r}: {outstanding} requests outstanding, oldest wait {wait} s for op {labels['op']}")
    print(f"rank {r}: NVMe read {int(get(s, 'zrt_io_bytes_total', rank=r, dir='read'))} B, written "
          f"{int(get(s, 'zrt_io_bytes_total', rank=r, dir='write'))} B, most in flight {int(most)} of {int(cap)}, "
          f"oldest io wait {wait} s ({labels['op']})")


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def table_matches(row, value):
    """The table's first figure (device, current), printed to its shown precision, is `value`."""
    m = re.search(r"(\d+(?:\.\d+)?) ?(B|KiB|MiB|GiB|TiB)\b", row)
    if not m:
        return False
    shown, unit = m.group(1), m.group(2)
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return abs(value / UNITS[unit] - float(shown)) <= 0.5 * 10 ** -decimals + 1e-12


def leftovers(path):
    return [os.path.join(d, f) for d, _, files in os.walk(path) for f in files]


def children(pid):
    """The processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def trainer_ranks(mpirun_pid, trainer):
    """The zrt-train processes under mpirun (its children, or an orted's)."""
    found, todo = [], [mpirun_pid]
    while todo:
        for c in children(todo.pop()):
            try:
                exe = os.readlink(f"/proc/{c}/exe")
            except OSError:
                continue
            (found if os.path.samefile(exe, trainer) else todo).append(c)
    return sorted(found)


def signal_mode(a):
    for how in ("SIGTERM to rank 1", "SIGUSR1 to mpirun"):
        stop_and_resume(a, how)


def stop_and_resume(a, how):
    with tempfile.TemporaryDirectory() as work:
        nvme = os.path.join(work, "nvme")
        os.makedirs(nvme)
        with open(os.path.join(a.configs, "stage3_nvme_offload.json")) as f:
            config = json.load(f)
        for key in ("offload_optimizer", "offload_param"):
            config["zero_optimization"][key]["nvme_path"] = nvme
        cfg = os.path.join(work, "config.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        save = os.path.join(work, "save")
        log = os.path.join(work, "log.jsonl")
        base = ["-np", "2", a.trainer, "--config", cfg, "--progress", "off", "--eval-every", "0",
                "--save-dir", save] + TINY
        cmd = a.mpiexec + base + ["--steps", "100000", "--save-on-signal", "--json-log", log]
        port = free_port() if how == "SIGTERM to rank 1" else None
        if port:
            cmd += ["--metrics-port", str(port)]  # the NVMe engine's figures, scraped live
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def logged():
            try:
                with open(log) as f:
                    return sum(1 for _ in f) >= 3
            except OSError:
                return False
        wait_for(logged, "3 logged steps", p)
        if not leftovers(nvme):
            fail("no swap file while training: the test would prove nothing")
        if port:
            text = wait_for(lambda: (lambda t: t if steps_done(t) >= 3 else None)(scrape(port)),
                            "a report of step 3 on /metrics", p)
            s = samples(text)
            for r in ("0", "1"):
                check_io_live(s, r)
                check_comm_live(s, r)
        if how == "SIGUSR1 to mpirun":
            p.send_signal(signal.SIGUSR1)
            # mpirun forwards it to one rank after the other: when rank 1 had it first and the
            # ranks agreed before rank 0's copy came, rank 0 says so (seen under ASan with load).
            name = "SIGUSR1(?: to another rank)?"
        else:
            ranks = trainer_ranks(p.pid, a.trainer)
            if len(ranks) != 2:
                p.kill()
                fail(f"found {len(ranks)} zrt-train processes under mpirun, want 2")
            os.kill(ranks[1], signal.SIGTERM)
            name = "SIGTERM to another rank"  # rank 0 was not signalled: it says so
        try:
            out, _ = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            fail("the job did not end within 90 s of SIGTERM", p.communicate()[0])
        m = re.search(f"stopped by {name}" + r" after step (\d+): saved (\S+)/(step\d+)", out)
        if not m:
            fail(f"{how}: no 'stopped by {name} after step N' message (exit {p.returncode})", out)
        stopped = int(m.group(1))
        if p.returncode != 3:
            fail(f"mpirun exited {p.returncode}, want 3 (stopped on a signal after saving)", out)
        ckpt = os.path.join(save, m.group(3))
        with open(os.path.join(save, "latest")) as f:
            latest = f.read().strip()
        if not os.path.isdir(ckpt) or latest != m.group(3):
            fail(f"no checkpoint {ckpt} named by {save}/latest", out)
        if leftovers(nvme):
            fail(f"swap files left after the stop: {leftovers(nvme)}", out)
        print(f"{how}: stopped after step {stopped}, saved {ckpt}, exit 3, no swap file left")

        log2 = os.path.join(work, "resumed.jsonl")
        r = subprocess.run(a.mpiexec + base + ["--steps", str(stopped + 2), "--resume", "--json-log", log2],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            fail(f"--resume exited {r.returncode}", r.stdout + r.stderr)
        with open(log2) as f:
            resumed = [r["step"] for r in map(json.loads, f) if "step" in r]  # the last line is the ledger
        if resumed != [stopped + 1, stopped + 2]:
            fail(f"the resumed run logged steps {resumed}, want {[stopped + 1, stopped + 2]}")
        if leftovers(nvme):
            fail(f"swap files left after the resumed run: {leftovers(nvme)}")
        print(f"--resume: logged steps {resumed}")


def timeout_mode(a):
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(a.configs, "stage2.json")) as f:
            config = json.load(f)
        config.setdefault("zrt", {})["comm_timeout_s"] = 3
        cfg = os.path.join(work, "config.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        log = os.path.join(work, "log.jsonl")
        cmd = a.mpiexec + ["-np", "2", a.trainer, "--config", cfg, "--progress", "off", "--eval-every", "0",
                           "--steps", "100000", "--json-log", log] + TINY
        env = {k: v for k, v in os.environ.items() if k != "ZRT_COMM_TIMEOUT_S"}
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

        def logged():
            try:
                with open(log) as f:
                    return sum(1 for _ in f) >= 3
            except OSError:
                return False
        wait_for(logged, "3 logged steps", p)
        ranks = trainer_ranks(p.pid, a.trainer)
        if len(ranks) != 2:
            p.kill()
            fail(f"found {len(ranks)} zrt-train processes under mpirun, want 2")
        os.kill(ranks[1], signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            fail("no timeout report within 30 s of stopping rank 1 with comm_timeout_s 3", p.communicate()[0])
        finally:
            for sig in (signal.SIGCONT, signal.SIGKILL):  # a rank mpirun left stopped
                try:
                    os.kill(ranks[1], sig)
                except ProcessLookupError:
                    pass
        took = time.monotonic() - stopped_at
        if p.returncode == 0 or "collective timeout" not in out or "(timeout 3.0 s)" not in out:
            fail(f"exit {p.returncode} after {took:.1f} s: want non-zero with the watchdog's report "
                 "of a 3.0 s timeout", out)
        print(f"rank 1 stopped: the job ended {took:.1f} s later (exit {p.returncode}) with the watchdog's report")


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit("usage: check_live.py --mode metrics|signal|timeout --configs DIR -- MPIEXEC... ZRT_TRAIN")
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["metrics", "signal", "timeout"], required=True)
    ap.add_argument("--configs", required=True)
    a = ap.parse_args(argv[:split])
    rest = argv[split + 1:]
    a.mpiexec, a.trainer = rest[:-1], rest[-1]
    {"metrics": metrics, "signal": signal_mode, "timeout": timeout_mode}[a.mode](a)
    print("PASS")


if __name__ == "__main__":
    main()
