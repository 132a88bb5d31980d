"""Problems found while reading a job file: errors reject the file, warnings do not.

Every problem names the field by its dotted path in the user's own format (for example
``taskRoles.worker.resourcePerInstance.gpu``), says what is wrong, and where possible how to fix it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One error or warning about one field of a job file."""

    path: str
    message: str
    hint: str | None = None
    line: int | None = None

    def render(self) -> str:
        where = self.path or "(file)"
        if self.line is not None:
            where = f"{where} (line {self.line})"
        text = f"{where}: {self.message}"
        if self.hint:
            text = f"{text}; {self.hint}"
        return text

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "message": self.message, "hint": self.hint, "line": self.line}


class SpecError(Exception):
    """A job file that cannot be accepted. Carries every problem found, not only the first."""

    def __init__(self, problems: Iterable[SpecProblem]) -> None:
        self.problems: list[SpecProblem] = list(problems)
        if not self.problems:
            raise ValueError("SpecError needs at least one problem")
        super().__init__("\n".join(p.render() for p in self.problems))


@dataclass(slots=True)
class ProblemCollector:
    """Accumulates problems while a reader walks a document, so all of them are reported at once."""

    errors: list[SpecProblem] = field(default_factory=list)
    warnings: list[SpecProblem] = field(default_factory=list)

    def error(self, path: str, message: str, hint: str | None = None) -> None:
        self.errors.append(SpecProblem(path, message, hint))

    def warn(self, path: str, message: str, hint: str | None = None) -> None:
        self.warnings.append(SpecProblem(path, message, hint))

    def raise_if_errors(self) -> None:
        if self.errors:
            raise SpecError(self.errors)

    def with_lines(self, line_of: dict[str, int]) -> None:
        """Attach source line numbers, using the nearest enclosing path that has one."""
        self.errors = [_locate(p, line_of) for p in self.errors]
        self.warnings = [_locate(p, line_of) for p in self.warnings]


def _locate(problem: SpecProblem, line_of: dict[str, int]) -> SpecProblem:
    if problem.line is not None:
        return problem
    path = problem.path
    while path:
        if path in line_of:
            return replace(problem, line=line_of[path])
        path = _parent(path)
    return problem


def _parent(path: str) -> str:
    if path.endswith("]"):
        return path[: path.rfind("[")]
    return path.rpartition(".")[0]


def join_path(base: str, key: str | int) -> str:
    """Dotted path of a child: ``taskRoles`` + ``a`` is ``taskRoles.a``; list items use ``[i]``."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key
