"""The dashboard's files and the job templates its Submit page offers.

The page is a small single-page app (``web/``, TypeScript with Preact, built by ``make web`` into
``server/web/dist``). Everything it loads comes from here: no CDN, no font or script from
elsewhere, which its Content-Security-Policy also enforces in the browser."""

from __future__ import annotations

import mimetypes
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.schemas import PlanOut, PlanRequest
from shoal.server.services.dryrun import check_jobs

router = APIRouter()

DIST = Path(__file__).resolve().parent.parent / "web" / "dist"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}

NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>shoal</title>
<h1>The dashboard is not built</h1>
<p>This shoal was installed without its web files. In a checkout, <code>make web</code> builds
them (Node.js and npm needed); the API and the CLI work without them.</p>"""

TEMPLATES = (
    ("native", "native", "native.yaml"),
    ("native-distributed", "native", "native-distributed.yaml"),
    ("pai", "pai", "pai.yaml"),
    ("pai-distributed", "pai", "pai-distributed.yaml"),
    ("pai-v1", "pai-v1", "pai-v1.json"),
    ("pai-v1-distributed", "pai-v1", "pai-v1-distributed.json"),
    ("maro", "maro", "maro.yaml"),
    ("maro-distributed", "maro", "maro-distributed.yaml"),
    ("jupyter", "native", "jupyter.yaml"),
    ("tensorboard", "native", "tensorboard.yaml"),
)


class CheckProblem(BaseModel):
    path: str
    message: str
    hint: str | None = None
    line: int | None = None


class JobCheck(BaseModel):
    """A job file checked as the Submit page's editor changes: its problems (by field path and
    line), its warnings, and where it would run now."""

    valid: bool
    code: str | None = None
    problems: list[CheckProblem] = []
    warnings: list[CheckProblem] = []
    plans: list[PlanOut] = []


class JobTemplate(BaseModel):
    name: str
    format: str
    text: str


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui", include_in_schema=False)
def ui_root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header takes gzip (named, with a q-value above 0)."""
    for part in accept_encoding.split(","):
        coding, *params = (p.strip() for p in part.split(";"))
        if coding.lower() not in ("gzip", "x-gzip"):
            continue
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    return float(value) > 0
                except ValueError:
                    return False
        return True
    return False


def _asset(asset: Path, request: Request) -> FileResponse:
    """An asset, gzipped when ``make web`` wrote its ``NAME.gz`` twin and the browser takes
    gzip: the same bytes once unpacked, a third or less of them on the wire."""
    headers = {**SECURITY_HEADERS, "Cache-Control": "public, max-age=31536000, immutable"}
    packed = asset.with_name(asset.name + ".gz")
    if not packed.is_file():
        return FileResponse(asset, headers=headers)
    headers["Vary"] = "Accept-Encoding"  # caches keep the two answers apart
    if not accepts_gzip(request.headers.get("accept-encoding", "")):
        return FileResponse(asset, headers=headers)
    media_type = mimetypes.guess_type(asset.name)[0] or "application/octet-stream"
    headers["Content-Encoding"] = "gzip"
    return FileResponse(packed, headers=headers, media_type=media_type)


@router.get("/ui/{path:path}", include_in_schema=False)
def ui(path: str, request: Request) -> Response:
    """A built asset (named by its content hash: cached for good; gzipped for browsers that
    take it), else the app's page (routes are after ``#``, so every other path is the page
    itself)."""
    if path.startswith("assets/"):
        asset = (DIST / path).resolve()
        if asset.is_relative_to(DIST / "assets") and asset.is_file():
            return _asset(asset, request)
        return Response("no such file", status_code=404, media_type="text/plain")
    index = DIST / "index.html"
    if not index.is_file():
        return HTMLResponse(NOT_BUILT, status_code=503, headers=SECURITY_HEADERS)
    return FileResponse(index, headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})


@router.get("/api/v1/job-templates", response_model=list[JobTemplate], tags=["dashboard"])
def job_templates(_: Caller) -> list[JobTemplate]:
    """The job file templates `shoal job template` prints, one per format (and a distributed
    variant of each)."""
    folder = resources.files("shoal.spec").joinpath("templates")
    return [
        JobTemplate(name=name, format=fmt, text=folder.joinpath(file).read_text("utf-8"))
        for name, fmt, file in TEMPLATES
    ]


@router.post("/api/v1/jobs/check", response_model=JobCheck, tags=["dashboard"])
def check_job(body: PlanRequest, ctx: Context, caller: Caller) -> JobCheck:
    """Validate a job file and dry-run it (`shoal job plan`), answering 200 either way: a file
    with errors is a successful answer about the file (`valid: false` and its problems), so an
    editor can call it on every change. Nothing is stored."""
    try:
        plans, warnings = check_jobs(ctx, caller, body)
    except ApiError as exc:
        if exc.status >= 500:
            raise
        problems = [CheckProblem.model_validate(p) for p in exc.problems or []]
        return JobCheck(
            valid=False,
            code=exc.code,
            problems=problems or [CheckProblem(path="", message=exc.message)],
        )
    return JobCheck(
        valid=True,
        warnings=[CheckProblem.model_validate(w) for w in warnings],
        plans=plans,
    )
