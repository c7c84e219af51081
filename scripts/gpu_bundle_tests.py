"""Runs the GPU bundle's tests from its manifest (scripts/gpu_bundle_manifest.py wrote it).

usage: gpu_bundle_tests.py BUNDLE LOG_DIR (--cuda | --host) [--require-run]
  --cuda: the tests labelled `cuda`; --host: every other listed test.
  --require-run: a skip, or a test not run for a missing module, counts as a failure (on the
    GPU machine a cuda test must run).
One line per test; a log per test in LOG_DIR; exits 1 when any failed, naming them.
"""
import ast
import importlib.util
import json
import os
import subprocess
import sys
import time


def missing_module(command, bundled):
    """A module a Python test imports (anywhere in it) that neither this interpreter nor the
    bundle's sources provide (transformers in the minimal root), found before the test runs: the
    test is reported as not run, naming it."""
    for arg in command:
        if arg.endswith(".py") and os.path.isfile(arg):
            # The import statements themselves (ast), not lines of text: a docstring's line that
            # starts "from fp64 ..." names no module.
            for node in ast.walk(ast.parse(open(arg).read(), arg)):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for module in (n.split(".")[0] for n in names):
                    if module not in bundled and importlib.util.find_spec(module) is None:
                        return module
    return None


def main():
    bundle, log_dir, which = sys.argv[1], sys.argv[2], sys.argv[3]
    require_run = "--require-run" in sys.argv[4:]
    manifest = json.load(open(os.path.join(bundle, "manifest.json")))
    os.makedirs(log_dir, exist_ok=True)
    failed, counts = [], {"passed": 0, "skipped": 0, "failed": 0}
    bundled = {f[:-3] for _, _, files in os.walk(os.path.join(bundle, "src")) for f in files
               if f.endswith(".py")}
    for test in manifest["tests"]:
        if ("cuda" in test["labels"]) != (which == "--cuda"):
            continue
        sub = lambda s: s.replace("@B@", bundle)
        env = dict(os.environ)
        for assignment in test["env"]:
            key, _, value = sub(assignment).partition("=")
            env[key] = value if key != "PYTHONPATH" else value + ":" + os.environ.get("PYTHONPATH", "")
        command = [sub(c) for c in test["command"]]
        module = missing_module(command, bundled)
        if module:
            # Where the tests must run (the cuda tests on the GPU machine), not running fails.
            verdict = "failed" if require_run else "skipped"
            counts[verdict] += 1
            if require_run:
                failed.append(test["name"])
            print(f"{test['name']}: not run (needs the Python module {module}, which this python3 lacks)")
            continue
        workdir = sub(test["workdir"])
        os.makedirs(workdir, exist_ok=True)
        start = time.monotonic()
        with open(os.path.join(log_dir, test["name"] + ".log"), "w") as log:
            try:
                rc = subprocess.run(command, cwd=workdir, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, timeout=float(test["timeout"])).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            except OSError as e:  # a program the manifest names is not there: the bundle's fault
                print(f"cannot start {command[0]}: {e}", file=log)
                rc = f"not started: {e.strerror}"
        seconds = time.monotonic() - start
        skip_code = test.get("skip_code")
        if rc == 0:
            verdict = "passed"
        elif skip_code is not None and rc == int(skip_code) and not require_run:
            verdict = "skipped"
        else:
            verdict = "failed"
            failed.append(test["name"])
        counts[verdict] += 1
        print(f"{test['name']}: {verdict} (rc {rc}, {seconds:.1f} s)", flush=True)
    print(f"{counts['passed']} passed, {counts['skipped']} skipped, {counts['failed']} failed"
          + (": " + " ".join(failed) if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
