"""`pip install .` installs what running needs; plotting and the dev tools are extras, and a
command that needs an extra that is missing says how to install it."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "sim"

WITHOUT_MATPLOTLIB = """
import json, sys
sys.modules["matplotlib"] = None  # as if `pip install .` had not installed it
sys.argv = ["shoal", *json.loads(sys.argv[1])]
from shoal.cli.entry import main
main()
"""


def test_runtime_dependencies_leave_out_plots_and_dev_tools() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {d.split(">")[0].split("<")[0].split("=")[0].lower() for d in project["dependencies"]}
    assert not runtime & {"matplotlib", "pytest", "ruff", "mypy", "hypothesis", "pytest-xdist"}
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["plots"])
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["dev"])


def test_sim_report_without_matplotlib_says_how_to_install_it(tmp_path: Path) -> None:
    report = tmp_path / "report"
    args = ["sim", "--trace", str(EXAMPLES / "two-teams-jobs.yaml"), "--cluster",
            str(EXAMPLES / "two-teams.yaml"), "--report", str(report)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "pip install 'shoal[plots]'" in done.stderr
    assert not report.exists()  # nothing half-written
    without_report = subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, json.dumps([*args[:-2], "-o", "json"])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert without_report.returncode == 0, without_report.stderr
