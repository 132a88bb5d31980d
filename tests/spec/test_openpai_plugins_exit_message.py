"""The line a failed plugin step leaves for the agent (shoal.agent.exit_message): read as the
task wrote it, and never through a link or from anything but a plain file of its own."""

from __future__ import annotations

import os
from pathlib import Path

from shoal.agent.exit_message import MAX_CHARS, read_exit_message
from shoal.core.lifecycle import ProcessExit, end_task


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "attempt"
    (work / ".shoal").mkdir(parents=True)
    return work


def test_the_first_line_is_read_cleaned_and_cut(tmp_path: Path) -> None:
    work = _workdir(tmp_path)
    message = work / ".shoal" / "exit-message"
    assert read_exit_message(work) is None
    message.write_text("runtime plugin cmd: preCommands[0] `false`\texited 1\nmore\n")
    assert read_exit_message(work) == "runtime plugin cmd: preCommands[0] `false` exited 1"
    message.write_text("x" * 10_000)
    assert read_exit_message(work) == "x" * MAX_CHARS


def test_links_pipes_and_second_names_are_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "agent-secret"
    secret.write_text("do not report me\n")
    work = _workdir(tmp_path)
    message = work / ".shoal" / "exit-message"
    message.symlink_to(secret)
    assert read_exit_message(work) is None
    message.unlink()
    os.link(secret, message)
    assert read_exit_message(work) is None
    message.unlink()
    os.mkfifo(message)
    assert read_exit_message(work) is None
    message.unlink()
    (work / ".shoal").rmdir()
    (work / ".shoal").symlink_to(tmp_path)  # the directory itself swapped for a link
    (tmp_path / "exit-message").write_text("from elsewhere\n")
    assert read_exit_message(work) is None


def test_the_message_leads_the_tasks_diagnostics() -> None:
    said = "runtime plugin git: `git clone file:///r.git` into src exited 128"
    end = end_task(ProcessExit(128, message=said))
    assert (end.exit_code, end.diagnostics) == (128, said)
    assert end_task(ProcessExit(1)).diagnostics == ""
