"""The shell script a task runs when runtime plugins wrap its commands (shoal.spec.openpai_plugins).

POSIX ``sh`` (containers and Pods run commands with ``/bin/sh -c``), built as OpenPAI's runtime
ran plugins (``openpai-runtime:src/runtime.d/runtime_entry.sh``):

- each plugin's steps run in a subshell of their own before the task's commands, under
  ``set -e`` (``failurePolicy: fail``, the default): the first command that fails ends the task
  with that command's exit code, and the reason (``runtime plugin cmd: preCommands[1] `false`
  exited 1``) goes to stderr and to ``$SHOAL_WORKDIR/.shoal/exit-message`` (a Pod's
  ``/dev/termination-log``), which the agent reports as the task's diagnostics;
- with ``failurePolicy: ignore``, a failing command is said on stderr and the rest go on;
- the task's commands run next; post-steps run only if they succeeded (OpenPAI ran
  ``postcommands`` only then), and a failing post-step fails the task the same way;
- as in OpenPAI, what a step exports or ``cd``s into does not reach the commands after it.

A role no plugin applies to keeps its command exactly as written.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from shoal.protocol import EXIT_MESSAGE_FILE

SHOWN_CHARS = 60

_FUNCTIONS = f"""\
# shoal: OpenPAI runtime plugins around the task's commands (docs/openpai-compat.md)
shoal_plugin_failed() {{
  printf 'shoal: %s\\n' "$1" >&2
  if [ -n "${{SHOAL_WORKDIR:-}}" ] && [ -d "$SHOAL_WORKDIR/.shoal" ]; then
    printf '%s\\n' "$1" > "$SHOAL_WORKDIR/{EXIT_MESSAGE_FILE}" 2>/dev/null || :
  fi
  if [ -w /dev/termination-log ]; then printf '%s' "$1" > /dev/termination-log 2>/dev/null || :; fi
}}
shoal_step_ended() {{
  if [ "$1" -ne 0 ] && [ -n "${{shoal_step:-}}" ]; then
    shoal_plugin_failed "$shoal_step exited $1"
  fi
}}
shoal_ignored() {{
  printf 'shoal: %s exited %s; going on (failurePolicy: ignore)\\n' "$2" "$1" >&2
}}"""

_CHECK = 'shoal_rc=$?; if [ "$shoal_rc" -ne 0 ]; then exit "$shoal_rc"; fi'
# a task's commands killed by a signal end the script by the same signal, as they would alone
_COMMANDS_ENDED = """\
shoal_rc=$?
if [ "$shoal_rc" -gt 128 ] && [ "$shoal_rc" -lt 160 ]; then
  kill -s "$(kill -l "$shoal_rc")" $$ 2>/dev/null
fi
if [ "$shoal_rc" -ne 0 ]; then exit "$shoal_rc"; fi"""
_FIRST_TASK = '[ "${SHOAL_TASK_INDEX:-0}" = 0 ] || exit 0'


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a plugin runs: a shell command (the user's, or one shoal generated), or a
    check that a program is on PATH (``program``)."""

    text: str
    describe: str  # how a failure names it: "preCommands[1] `false`"
    program: str | None = None

    @staticmethod
    def command(text: str, what: str) -> Action:
        return Action(text, f"{what} `{shown(text)}`")

    @staticmethod
    def generated(text: str, describe: str) -> Action:
        return Action(text, describe)

    @staticmethod
    def needs(program: str, describe: str) -> Action:
        return Action("", describe, program=program)


@dataclass(frozen=True, slots=True)
class Step:
    """What one plugin runs at one point of a task (before or after its commands)."""

    label: str  # "runtime plugin cmd"
    actions: tuple[Action, ...]
    ignore_failures: bool = False
    first_task_only: bool = False


def shown(text: str) -> str:
    """A command as a failure message shows it: its first line, cut at ``SHOWN_CHARS``."""
    lines = [line.strip() for line in text.strip().splitlines()] or [""]
    first = lines[0]
    if len(first) > SHOWN_CHARS or len(lines) > 1:
        return first[: SHOWN_CHARS - 1].rstrip() + "…"
    return first


def wrap(command: str, pre: Sequence[Step], post: Sequence[Step]) -> str:
    """The task's ``command`` with the plugins' steps around it."""
    if not pre and not post:
        return command
    lines = [_FUNCTIONS]
    for step in pre:
        lines += _step(step)
    if post:
        lines += ["(", command, ")", _COMMANDS_ENDED]
        for step in post:
            lines += _step(step)
    else:
        lines.append(command)
    return "\n".join(lines)


def _step(step: Step) -> list[str]:
    body = [_FIRST_TASK] if step.first_task_only else []
    if step.ignore_failures:
        body += [_ignoring(step.label, action) for action in step.actions]
        return ["(", *body, f") || shoal_ignored $? {shlex.quote(step.label)}"]
    body += ["trap 'shoal_step_ended $?' EXIT", "set -e"]
    for action in step.actions:
        body += _failing(step.label, action)
    body.append("shoal_step=")
    return ["(", *body, ")", _CHECK]


def _failing(label: str, action: Action) -> list[str]:
    if action.program is not None:
        message = _missing(label, action.program)
        program = shlex.quote(action.program)
        return [
            "shoal_step=",
            f"command -v {program} >/dev/null 2>&1 || "
            f"{{ shoal_plugin_failed {shlex.quote(message)}; exit 127; }}",
        ]
    return [f"shoal_step={shlex.quote(f'{label}: {action.describe}')}", action.text]


def _ignoring(label: str, action: Action) -> str:
    if action.program is not None:
        message = _missing(label, action.program) + "; skipped (failurePolicy: ignore)"
        program = shlex.quote(action.program)
        return (
            f"command -v {program} >/dev/null 2>&1 || "
            f"{{ printf 'shoal: %s\\n' {shlex.quote(message)} >&2; exit 0; }}"
        )
    what = shlex.quote(f"{label}: {action.describe}")
    return f"{{\n{action.text}\n}} || shoal_ignored $? {what}"


def _missing(label: str, program: str) -> str:
    return (
        f"{label}: `{program}` is not installed in the task's environment "
        "(install it in the role's image or Python environment)"
    )
