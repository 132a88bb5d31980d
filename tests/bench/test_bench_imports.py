"""Every bench script and the modules beside it import as ``make bench`` runs them:
``.venv/bin/python bench/X.py`` (or ``bench/peers/X.py``) from the repository's root, so the
script's own folder, and no other, starts ``sys.path``. Nothing is measured: each file runs under
a name other than ``__main__``. Cheap: one interpreter for them all, the bench modules dropped
between files so each finds its siblings itself. (Issue 25: ``bench/peers/run.py`` died on
``import launch_containers`` in bench/launch.py, which only worked from bench/'s own folder.)"""

from __future__ import annotations

import json
import py_compile
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# Run by the interpreter of bench/peers/.venv-ray (ray is not in shoal's venv): compiled only.
OTHER_VENV = {BENCH / "peers" / "ray_client.py"}

# Imports each file with runpy as its script would start: its folder first on sys.path, then
# restores sys.path and forgets the modules of bench/ and tests/ it loaded (the heavy shoal and
# library modules stay, which is what keeps this to one interpreter).
CHECK = """
import json, runpy, sys, traceback
from pathlib import Path
root = Path(sys.argv[1])
local = (str(root / "bench"), str(root / "tests"))
failed = {}
for path in sys.argv[2:]:
    saved_path, saved_argv, before = list(sys.path), list(sys.argv), set(sys.modules)
    sys.path.insert(0, str(Path(path).parent))
    sys.argv = [path]
    try:
        runpy.run_path(path, run_name="__bench_import_check__")
    except BaseException:
        failed[path] = traceback.format_exc(limit=-3)
    sys.path[:], sys.argv = saved_path, saved_argv
    for name in set(sys.modules) - before:
        where = getattr(sys.modules[name], "__file__", None) or ""
        if where.startswith(local) or name == "tests" or name.startswith("tests."):
            del sys.modules[name]
print(json.dumps(failed))
"""


def bench_files() -> list[Path]:
    return sorted([*BENCH.glob("*.py"), *(BENCH / "peers").glob("*.py")])


def test_every_bench_module_imports_as_make_bench_runs_it() -> None:
    files = [p for p in bench_files() if p not in OTHER_VENV]
    assert len(files) >= 20, files  # bench/*.py and bench/peers/*.py were found
    # -P: no folder of ours on sys.path but the script's (as for `python bench/X.py`)
    argv = [sys.executable, "-P", "-c", CHECK, str(ROOT), *map(str, files)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(f"{path}:\n{error}" for path, error in failed.items())


def test_the_ray_client_compiles() -> None:
    for path in OTHER_VENV:
        py_compile.compile(str(path), doraise=True)
