"""`pip install .` installs what running needs; plotting and the dev tools are extras, and a
command that needs an extra that is missing says how to install it."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

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


def test_license_metadata_is_an_spdx_expression_with_its_file() -> None:
    """setuptools >= 77 warns (~15 lines, at each of a build's three steps: the opening of
    `make run`) about the old ``license = {text = ...}`` table."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert project["license"] == "MIT"
    assert all((ROOT / name).is_file() for name in project["license-files"])
    assert any(r.startswith("setuptools>=77") for r in pyproject["build-system"]["requires"])


def test_building_with_the_pinned_setuptools_prints_no_deprecation(tmp_path: Path) -> None:
    """The wheel's metadata, built offline as `make run`'s `pip install` builds it, with the
    wheelhouse's setuptools (the pinned one); a copy of the project, so the checkout's build/
    and egg-info are left alone."""
    wheelhouse = ROOT / ".venv" / "wheelhouse"
    if not list(wheelhouse.glob("setuptools-*.whl")):
        pytest.skip(f"no setuptools wheel in {wheelhouse} (make wheelhouse builds it)")
    project = tmp_path / "project"
    (project / "src" / "shoal").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (project / name).write_bytes((ROOT / name).read_bytes())
    (project / "src" / "shoal" / "__init__.py").write_text('__version__ = "0"\n')
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--find-links",
         str(wheelhouse), "--wheel-dir", str(tmp_path / "out"), "-v", str(project)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "Warning" not in output and "deprecated" not in output, output
    (wheel,) = (tmp_path / "out").glob("shoal-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("shoal-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
