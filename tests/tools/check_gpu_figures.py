"""scripts/gpu_figures.py --host-check (zrt-train's parts on the host device with tiny sizes):
it exits 0 with a FLOP-rate row holding a positive rate and a ladder row naming the largest size
of its ladder, in the table and in figures.json; and with a text that does not exist it exits 1,
the rows naming zrt-train's error (the file) instead of a figure.

    check_gpu_figures.py GPU_FIGURES_PY ZRT_TRAIN_DIR"""
import json
import os
import subprocess
import sys
import tempfile


def fail(message, output=""):
    sys.exit(f"check_gpu_figures: {message}\n{output}")


def figures(script, train_dir, out, *extra):
    env = dict(os.environ, PATH=train_dir + os.pathsep + os.environ["PATH"])
    done = subprocess.run([sys.executable, script, "--host-check", "--out", out, *extra], env=env,
                          capture_output=True, text=True, timeout=110)
    with open(os.path.join(out, "figures.json")) as f:
        return done, json.load(f)["rows"]


def main():
    script, train_dir = sys.argv[1:3]
    with tempfile.TemporaryDirectory(prefix="zrt-gpu-figures-") as out:
        done, rows = figures(script, train_dir, out)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            fail(f"--host-check exited {done.returncode}", output)
        flop = [r for r in rows if r["figure"].startswith("zrt-train FLOP rate")]
        if len(flop) != 1 or not float(flop[0]["zrt"].split()[0]) > 0:
            fail("no FLOP-rate row with a positive rate", output)
        ladder = [r for r in rows if r["figure"].startswith("largest GPT-2 on NVMe")]
        if len(ladder) != 1 or ": 2x128," not in ladder[0]["figure"] or "trained" not in ladder[0]["zrt"]:
            fail("the ladder row does not name 2x128, its largest size, as trained", output)
        for r in flop + ladder:
            if r["figure"] not in done.stdout:
                fail(f"the table lacks the row '{r['figure']}'", output)

        missing = os.path.join(out, "no-such-text.txt")
        done, rows = figures(script, train_dir, out, "--data", missing)
        if done.returncode != 1 or not all(missing in r["figure"] or "none trained" in r["figure"] for r in rows):
            fail(f"with a missing text: expected exit 1 and every row naming {missing}, got {done.returncode}",
                 done.stdout + done.stderr)
    print(f"check_gpu_figures: {len(flop + ladder)} rows checked, and a missing text reported by name")


if __name__ == "__main__":
    main()
