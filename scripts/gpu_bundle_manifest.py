"""Writes the GPU bundle's test manifest from a build tree's ctest listing.

scripts/gpu-bundle.sh runs it; the bundle carries no CMake tree, so scripts/gpu-check.sh --bundle
runs the tests from this list. Paths into the build tree become @B@/build/..., paths into the
source tree @B@/src/..., the MPI launcher @B@/bin/mpirun and the test venv's interpreter `python3`
(the GPU machine's, with its torch). Prints every file the listed commands name, one per line, so
the bundle script copies exactly those.

usage: gpu_bundle_manifest.py CTEST_JSON BUILD_DIR SOURCE_DIR MANIFEST_OUT
"""
import json
import re
import sys

# What the bundle runs: the GPU tests, the Engine's tests on the host device, the trainer's and
# the Python package's. Tests driven by cmake -P or shell scripts stay with the full suite.
SELECTED = re.compile(r"^(runtime_engine|trainer_|python_)")
# Unit tests that read their own source file (by __FILE__) need the source tree, not the bundle.
NEEDS_SOURCE_TREE = {"trainer_driver_test"}
DROPPED_ENV = re.compile(r"^(ASAN|LSAN|UBSAN|TSAN)_OPTIONS=")


def main():
    listing, build, source, manifest_out = sys.argv[1:5]
    build, source = build.rstrip("/"), source.rstrip("/")
    tests, files = [], set()

    def rewrite(text):
        # Interpreters first: the build's may live in a folder named after the build tree.
        text = re.sub(r"(?<![\w@])/[\w./+-]*/(?:bin|shims)/python3?(?:\.\d+)?(?=\s|$)", "python3", text)
        text = re.sub(r"(?<![\w@])/[\w./+-]*/mpiexec(?=\s|$)", "@B@/bin/mpirun", text)
        text = text.replace(build + "/", "@B@/build/").replace(build, "@B@/build")
        text = text.replace(source + "/", "@B@/src/").replace(source, "@B@/src")
        for path in re.findall(r"@B@/(?:build|src)/[\w./+-]+", text):
            files.add(path)
        return text

    for test in json.load(open(listing))["tests"]:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        labels = props.get("LABELS", [])
        command = test.get("command") or []
        if not command or not (SELECTED.match(test["name"]) or "cuda" in labels):
            continue
        if test["name"] in NEEDS_SOURCE_TREE:
            continue
        if re.search(r"/(cmake|bash|sh)$", command[0]):
            continue
        tests.append({
            "name": test["name"],
            "command": [rewrite(c) for c in command],
            "env": [rewrite(e) for e in props.get("ENVIRONMENT", []) if not DROPPED_ENV.match(e)],
            "labels": labels,
            "timeout": props.get("TIMEOUT", 120),
            "skip_code": props.get("SKIP_RETURN_CODE"),
            "workdir": rewrite(props.get("WORKING_DIRECTORY", build)),
        })
    with open(manifest_out, "w") as f:
        json.dump({"tests": tests}, f, indent=1)
    for path in sorted(files):
        print(path)


if __name__ == "__main__":
    main()
