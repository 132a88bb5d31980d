"""The ``shoal`` executable: answers ``shoal --version`` before loading the command tree."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:  # the same text as the full CLI's eager --version option
        from shoal import __version__

        print(f"shoal {__version__}")
        return
    from shoal.cli.main import main as run_cli

    run_cli()
