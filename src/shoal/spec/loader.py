"""Read job files: detect the format, read it, return the normalised jobs and warnings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.spec.errors import ProblemCollector, SpecError, SpecProblem
from shoal.spec.maro import read_maro
from shoal.spec.model import JobSpec, Runtime, SourceFormat
from shoal.spec.native import read_native
from shoal.spec.openpai_v1 import read_pai_v1
from shoal.spec.openpai_v2 import read_pai_v2
from shoal.spec.source import MAX_JOB_FILE_BYTES, decode_job_bytes, parse_document

FORMAT_HINT = (
    "a shoal job has `version: 1` and `roles:`; an OpenPAI v2 job `protocolVersion: 2`; an "
    "OpenPAI v1 job is JSON with `jobName` and `taskRoles`; a MARO job has `mode:` and "
    "`components:`. Start from `shoal job template --format native|pai|pai-v1|maro`"
)

MARO_NON_JOB_HINT = (
    "this is a MARO cluster file (create, join or setting), not a job; shoal needs no cluster "
    "file: run `shoal up` instead"
)


@dataclass(frozen=True, slots=True)
class ParsedJobs:
    """The jobs a file describes (a MARO schedule describes several) and what was not acted on."""

    format: SourceFormat
    jobs: tuple[JobSpec, ...]
    warnings: tuple[SpecProblem, ...] = field(default_factory=tuple)


def load_job_file(
    path: str | Path,
    params: Mapping[str, str] | None = None,
    format: SourceFormat | None = None,
    max_bytes: int = MAX_JOB_FILE_BYTES,
) -> ParsedJobs:
    file_path = Path(path)
    try:
        size = file_path.stat().st_size
        if size > max_bytes:  # refuse before reading a huge file into memory
            raise SpecError(
                [
                    SpecProblem(
                        "",
                        f"file is {size} bytes, over the {max_bytes}-byte limit for job files",
                        "keep data and code out of the job file and reference them",
                    )
                ]
            )
        raw = file_path.read_bytes()
    except OSError as exc:
        raise SpecError([SpecProblem("", f"cannot read {path}: {exc.strerror}")]) from None
    return load_job_bytes(raw, params, format, max_bytes)


def load_job_bytes(
    raw: bytes,
    params: Mapping[str, str] | None = None,
    format: SourceFormat | None = None,
    max_bytes: int = MAX_JOB_FILE_BYTES,
) -> ParsedJobs:
    return load_job_text(decode_job_bytes(raw, max_bytes), params, format)


def load_job_text(
    text: str,
    params: Mapping[str, str] | None = None,
    format: SourceFormat | None = None,
    runtime: Runtime = Runtime.PROCESS,
) -> ParsedJobs:
    """``runtime``: how a job whose file does not say will run (the submission's ``--runtime``
    or the server's default): it decides which fields are warned about as not used."""
    document = parse_document(text)
    data = document.data
    if not isinstance(data, dict):
        raise SpecError(
            [SpecProblem("", f"the top level must be a mapping, got {type(data).__name__}")]
        )
    detected = format or detect_format(data)
    problems = ProblemCollector()
    try:
        jobs = _read(detected, data, dict(params or {}), problems)
        _warn_images(detected, jobs, problems, runtime)
    except SpecError as exc:
        problems.errors = exc.problems
        problems.with_lines(document.line_of)
        raise SpecError(problems.errors) from None
    problems.with_lines(document.line_of)
    return ParsedJobs(detected, tuple(jobs), tuple(problems.warnings))


IMAGE_PATHS = {
    SourceFormat.NATIVE: "roles.{role}.image",
    SourceFormat.PAI_V2: "taskRoles.{role}.dockerImage",
    SourceFormat.PAI_V1: "image",
    SourceFormat.MARO: "components.{role}.image",
}


def _warn_images(
    fmt: SourceFormat, jobs: list[JobSpec], problems: ProblemCollector, runtime: Runtime
) -> None:
    """A job that runs as processes keeps its roles' images but does not use them: say so, and
    how to run it in them."""
    warned: set[str] = set()
    how = "`shoal job submit --runtime container`"
    if fmt is SourceFormat.NATIVE:
        how = f"`runtime: container` in the job file or {how}"
    for job in jobs:
        if (job.runtime or runtime) is not Runtime.PROCESS:
            continue
        for role in job.roles:
            path = IMAGE_PATHS[fmt].format(role=role.name)
            if role.image is None or path in warned:
                continue
            warned.add(path)
            problems.warn(
                path,
                f"image {role.image} is not used: the job runs as processes (runtime process) "
                f"in the submitter's environment; {how} runs its tasks in the image",
            )


def detect_format(data: Mapping[str, Any]) -> SourceFormat:
    if "protocolVersion" in data:
        return SourceFormat.PAI_V2
    if "jobName" in data:
        return SourceFormat.PAI_V1
    if "components" in data:
        return SourceFormat.MARO
    if isinstance(data.get("mode"), str) and ("/" in data["mode"] or "name" in data):
        raise SpecError([SpecProblem("mode", "is a MARO cluster setting", MARO_NON_JOB_HINT)])
    if "redis_info" in data or "parallel_level" in data:
        raise SpecError([SpecProblem("", "this is a MARO process setting", MARO_NON_JOB_HINT)])
    if {"scenario_path", "main"} <= data.keys():
        return SourceFormat.MARO
    if "version" in data or "roles" in data:
        return SourceFormat.NATIVE
    raise SpecError([SpecProblem("", "cannot tell which job format this is", FORMAT_HINT)])


def _read(
    fmt: SourceFormat, data: dict[str, Any], params: dict[str, str], problems: ProblemCollector
) -> list[JobSpec]:
    if fmt is SourceFormat.NATIVE:
        return [read_native(data, params, problems)]
    if fmt is SourceFormat.PAI_V2:
        return [read_pai_v2(data, params, problems)]
    if fmt is SourceFormat.PAI_V1:
        if params:
            problems.warn("", "--param has no effect on OpenPAI v1 jobs (they have no parameters)")
        return [read_pai_v1(data, problems)]
    if params:
        problems.warn("", "--param has no effect on MARO jobs (they have no parameters)")
    return read_maro(data, problems)
