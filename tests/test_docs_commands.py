"""Every `shoal ...` command the README and docs/*.md show exists, with every option it uses.

Two kinds of places are read:

- shell code blocks (```bash, ```sh, ``` with no language): each `shoal` command in them,
  continuation lines joined, comments, `$ ` prompts and `VAR=value` prefixes dropped, `a; b`,
  `a && b`, `a | b` and `$(...)` split, `<placeholder>` made one word. Its words go through the
  CLI's own parser (click's, as `shoal` parses them: the command path, then the options and
  whether each takes a value), never run;
- inline code that starts with `shoal ` or `.venv/bin/shoal ` (`` `shoal job list [-A]` ``):
  the command path, with `a|b` alternatives each checked, and every option named in it.

A doc line that names a command or option the CLI does not have fails here, naming the file and
line.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from shoal.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
INLINE = re.compile(r"(?<!`)`((?:[\w.$()/-]*/)?shoal [^`]+)`(?!`)")  # `.venv/bin/shoal status`
PLACEHOLDER = re.compile(r"<[^<>\n]+>")
BOX_DRAWING = re.compile("[\u2500-\u257f]")
# Commands that run the command after them (their own options written `--name=value`): `sudo
# shoal up`, `nsenter --net=/run/netns/lab-h1 shoal server start ...` (docs/cluster.md's hosts).
WRAPPERS = ("sudo", "exec", "nsenter")
SEPARATORS = {";", "&&", "||", "|", "(", ")", "$(", "&", ">", ">>", "<", "2>", "2>&1"}
COMMAND = typer.main.get_command(app)


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str
    words: tuple[str, ...]  # after `shoal`


def shell_blocks(path: Path) -> Iterator[list[tuple[int, str]]]:
    """The shell code blocks' numbered lines; diagrams (box-drawing characters) left out."""
    language: str | None = None
    block: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence and language is None:
            language, block = fence.group(2), []
        elif fence:
            diagram = any(BOX_DRAWING.search(text) for _, text in block)
            if language in SHELL_BLOCKS and not diagram:
                yield block
            language = None
        elif language is not None:
            block.append((number, line))


def shell_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, logical line)`` of the shell code blocks, continuations joined."""
    for block in shell_blocks(path):
        yield from _logical_lines(block)


def _logical_lines(block: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    pending, start = "", 0
    for number, line in block:
        text = line.strip()
        if text.startswith("$ "):
            text = text[2:]
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        yield start, pending + text
        pending = ""


def shoal_words(line: str) -> Iterator[list[str]]:
    """The words after `shoal` of each shoal command in a shell line."""
    lexer = shlex.shlex(PLACEHOLDER.sub("PLACEHOLDER", line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: not a command line (output, prose)
        return
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token not in SEPARATORS and not token.startswith(("$(", "`")):
            segment.append(token)
            continue
        words = _after_shoal(segment)
        if words is not None:
            yield words
        segment = []


def _after_shoal(segment: list[str]) -> list[str] | None:
    """The words after the `shoal` that runs, if this segment runs shoal."""
    for i, token in enumerate(segment):
        if token == "shoal" or token.endswith("/shoal"):
            before = segment[:i]
            run_as_module = before[-2:] == ["-m", "shoal"] or before[-1:] == ["-m"]
            wrapped = bool(before) and all(t in WRAPPERS or t.startswith("--") for t in before)
            if all("=" in t for t in before) or run_as_module or wrapped:
                return segment[i + 1 :]
            return None
        launcher = token in ("python", "python3", "-m", *WRAPPERS) or token.endswith(
            ("/python", "/python3")
        )
        if "=" not in token and not launcher:
            return None
    return None


def block_commands() -> Iterator[DocCommand]:
    for path in DOCS:
        for number, line in shell_lines(path):
            for words in shoal_words(line):
                plain = tuple(w.strip("[]") for w in words)  # `[--force]`: an optional option
                yield DocCommand(f"{path.relative_to(ROOT)}:{number}", line, plain)


def inline_commands() -> Iterator[DocCommand]:
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in INLINE.finditer(text.replace("\n", " ")):  # a span may wrap a line
            number = text.count("\n", 0, match.start()) + 1
            words = tuple(match.group(1).replace("\\|", "|").split()[1:])  # `\|` in a table
            yield DocCommand(f"{path.relative_to(ROOT)}:{number}", match.group(1), words)


def parse(words: tuple[str, ...]) -> str | None:
    """None if `shoal WORDS` names a command and only options it has (click's parser: the
    command path, options and their values, no conversion, no callbacks); else what is wrong."""
    command: Any = COMMAND
    context = command.context_class(command, info_name="shoal")
    args = list(words)
    path = ["shoal"]
    while True:
        try:
            _, args, _ = command.make_parser(context).parse_args(args)
        except Exception as exc:  # click's NoSuchOption, BadOptionUsage: a usage error
            if not hasattr(exc, "format_message"):
                raise
            return f"{' '.join(path)}: {exc.format_message()}"
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            if args and not any(p.nargs == -1 for p in command.params):  # `shoal x a b` for `x A`
                return f"{' '.join(path)}: unexpected extra argument(s) {' '.join(args)}"
            return None
        if not args:
            return None  # `shoal job` alone: prints its help
        name, *args = args
        if name not in subcommands:
            return f"{' '.join(path)} has no command {name!r}"
        command = subcommands[name]
        context = command.context_class(command, parent=context, info_name=name)
        path.append(name)


def check_inline(words: tuple[str, ...]) -> str | None:
    """The command path (each of `a|b` alternatives) and every option named, leniently: the
    prose notation (`[--port]`, `FILE`, `--param k=v`) is not the shell's."""
    tokens = [w.strip("[](),.;:") for w in words]
    paths: list[tuple[list[str], Any]] = [(["shoal"], COMMAND)]
    for token in tokens:
        if not all(getattr(c, "commands", None) for _, c in paths):
            break
        alternatives = token.split("|")
        unknown = [a for a in alternatives if a not in paths[0][1].commands]
        if unknown:
            if token.startswith("-") or not token or not token[0].islower():
                break  # an option or a placeholder: the path ended
            return f"{' '.join(paths[0][0])} has no command {unknown[0]!r}"
        paths = [([*p, a], c.commands[a]) for p, c in paths for a in alternatives]
    for path, command in paths:
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        known |= {"--help"}
        for token in tokens:
            for option in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", token):
                name = option.split("=")[0]
                if name not in known and not _root_option(name):
                    return f"{' '.join(path)} has no option {name}"
    return None


def _root_option(name: str) -> bool:
    return any(name in (*p.opts, *p.secondary_opts) for p in COMMAND.params)


BLOCKS = list(block_commands())
INLINES = list(inline_commands())


def test_the_docs_show_many_commands() -> None:
    assert len(BLOCKS) > 100 and len(INLINES) > 200, (len(BLOCKS), len(INLINES))


def test_every_command_in_a_code_block_exists_with_its_options() -> None:
    wrong = [f"{c.where}: {c.text}\n    {problem}" for c in BLOCKS if (problem := parse(c.words))]
    assert not wrong, "\n".join(wrong)


def test_every_inline_shoal_command_exists_with_its_options() -> None:
    wrong = [
        f"{c.where}: `{c.text}`\n    {problem}"
        for c in INLINES
        if (problem := check_inline(c.words))
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("shoal job list -A  # everyone's", [["job", "list", "-A"]]),
        ("SHOAL_TOKEN=<alice's token> shoal job submit job.yaml", [["job", "submit", "job.yaml"]]),
        ("shoal token list; shoal token revoke 3", [["token", "list"], ["token", "revoke", "3"]]),
        (".venv/bin/shoal down && echo shoal", [["down"]]),
        ("pip install 'shoal[cluster]'", []),
        ("python -m shoal up", [["up"]]),
        (
            "nsenter --net=/run/netns/lab-h2 shoal agent run --home /tmp/lab/n1 > n1.log 2>&1 &",
            [["agent", "run", "--home", "/tmp/lab/n1"]],
        ),
        ("sudo nsenter --net=/run/netns/h shoal up", [["up"]]),
        ("ip netns exec lab-h1 shoal up", []),
    ],
)
def test_shell_lines_are_read_as_the_shell_would(line: str, expected: list[list[str]]) -> None:
    assert list(shoal_words(line)) == expected


def test_the_checks_find_what_is_wrong() -> None:
    assert parse(("job", "list", "--all-users")) is None
    assert "no command 'wait'" in (parse(("job", "wait", "12")) or "")
    assert "--bogus" in (parse(("job", "list", "--bogus")) or "")
    assert check_inline(("node", "cordon|drain|uncordon", "NODE")) is None
    assert "no command 'nope'" in (check_inline(("node", "cordon|nope")) or "")
    assert "--nodez" in (check_inline(("up", "[--port]", "[--nodez", "N]")) or "")
