"""Checks every format shares: run on normalised roles, reported in the user's field paths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shoal.spec.errors import ProblemCollector
from shoal.spec.model import MAX_TASKS_PER_JOB, TaskRoleSpec


@dataclass(frozen=True, slots=True)
class RolePaths:
    """Where each normalised field lives in a format, as ``str.format`` patterns over ``role``."""

    role: str
    instances: str
    command: str
    min_failed: str
    min_succeeded: str
    total: str = ""
    disable_word: str = "-1"  # how this format writes "no threshold" (OpenPAI v1: null)

    def at(self, pattern: str, role: str) -> str:
        return pattern.format(role=role)


@dataclass(frozen=True, slots=True)
class MappedRolePaths(RolePaths):
    """``RolePaths`` for formats that do not key roles by name: ``{role}`` is filled from
    ``key_of[role name]`` (a list index for OpenPAI v1, a config section for MARO RL workflows)."""

    key_of: Mapping[str, object] = field(default_factory=dict)

    def at(self, pattern: str, role: str) -> str:
        return pattern.format(role=self.key_of[role])


def check_roles(
    roles: Sequence[TaskRoleSpec], paths: RolePaths, problems: ProblemCollector
) -> None:
    by_env_name: dict[str, str] = {}
    for role in roles:
        upper = role.name.upper()
        if upper in by_env_name:
            problems.error(
                paths.at(paths.role, role.name),
                f"role name clashes with {by_env_name[upper]!r}: both become SHOAL_{upper}_* "
                "environment variables",
                "give roles names that differ by more than letter case",
            )
        by_env_name[upper] = role.name
        if not role.command.strip():
            problems.error(
                paths.at(paths.command, role.name),
                "command is empty",
                "give the shell command(s) this role runs",
            )
        _check_completion(role, paths, problems)
    total = sum(role.instances for role in roles)
    if total > MAX_TASKS_PER_JOB:
        problems.error(
            paths.total,
            f"job has {total} instances in all, over the limit of {MAX_TASKS_PER_JOB}",
            "split the job, or lower the instance counts",
        )


def _check_completion(role: TaskRoleSpec, paths: RolePaths, problems: ProblemCollector) -> None:
    policy = role.completion
    if policy.min_succeeded is not None and policy.min_succeeded > role.instances:
        problems.error(
            paths.at(paths.min_succeeded, role.name),
            f"is {policy.min_succeeded} but the role has only {role.instances} instance(s), so "
            "the job could never succeed",
            f"use a value from 1 to {role.instances}, or {paths.disable_word} to wait for all "
            "instances",
        )
    if policy.min_failed is not None and policy.min_failed > role.instances:
        problems.error(
            paths.at(paths.min_failed, role.name),
            f"is {policy.min_failed} but the role has only {role.instances} instance(s), so "
            "failures of this role could never fail the job",
            f"use a value from 1 to {role.instances}, or {paths.disable_word} if failures should "
            "never fail the job",
        )
