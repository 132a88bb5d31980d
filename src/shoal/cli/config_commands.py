"""``shoal config ...`` (contexts: server URL + token, like a kubeconfig), ``whoami``, ``login``,
``logout``."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, fail, print_json
from shoal.cli.render import console, err_console, new_table
from shoal.client import ShoalClient, discover
from shoal.client import config as clientconfig
from shoal.client.config import LOCAL, NAME_HINT, ClientConfig, Context
from shoal.paths import default_home, write_secret_file

config_app = typer.Typer(
    help="Contexts: which server the CLI talks to, with which token (like a kubeconfig).",
    no_args_is_help=True,
)


def mask(token: str | None) -> str:
    if not token:
        return "-"
    return f"{token[:8]}...(masked)" if len(token) > 12 else "(masked)"


def _token_text(context: Context) -> str:
    if context.token_file is not None:
        return f"file {context.token_file}"
    return "inline (masked)" if context.token else "none"


def _local_row() -> dict[str, str | None]:
    found = clientconfig.local_endpoint()
    return {
        "name": LOCAL,
        "server": found.url if found else None,
        "token": found.token_source if found and found.token_source else "none",
        "note": f"the cluster `shoal up` runs under {default_home()}",
    }


@config_app.command("get-contexts")
@api_errors
def get_contexts(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Every context, the current one marked with *; `local` is the cluster under $SHOAL_HOME."""
    config = ClientConfig.load()
    rows: list[dict[str, str | None]] = [
        {"name": c.name, "server": c.server, "token": _token_text(c), "note": ""}
        for c in sorted(config.contexts.values(), key=lambda c: c.name)
    ]
    rows.append(_local_row())
    if output is OutputFormat.JSON:
        print_json({"current": config.current, "file": str(config.path), "contexts": rows})
        return
    table = new_table()
    for column in ("current", "name", "server", "token"):
        table.add_column(column, overflow="fold")
    for row in rows:
        mark = "*" if row["name"] == config.current else ""
        table.add_row(mark, row["name"], row["server"] or "(not started)", row["token"])
    console.print(table)
    if config.current is None:
        console.print(
            "no current context: commands use $SHOAL_URL, else the local cluster", markup=False
        )


def _check_name(name: str) -> None:
    if name == LOCAL:
        raise fail(f"context name {LOCAL!r} is reserved for the cluster under $SHOAL_HOME")
    if not clientconfig.valid_name(name):
        raise fail(f"context name {name!r}: use {NAME_HINT}")


@config_app.command("set-context")
@api_errors
def set_context(
    name: str = typer.Argument(..., help="Context name."),
    server: str | None = typer.Option(None, "--server", help="Server URL, e.g. http://lab:8476."),
    token: str | None = typer.Option(None, "--token", help="A token, stored in the file."),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="A file holding the token (read at each call)."
    ),
    ca: Path | None = typer.Option(
        None, "--ca", help="The cluster's CA file (SERVER_HOME/pki/ca.crt) for an https:// server."
    ),
    use: bool = typer.Option(False, "--use", help="Also make it the current context."),
) -> None:
    """Create or change a context; only the options given change."""
    _check_name(name)
    if token is not None and token_file is not None:
        raise fail("give --token or --token-file, not both")
    if server is not None and not _urls(server):
        raise fail(
            f"--server {server!r}: write a URL such as http://host:8476 (several servers of one "
            "cluster: separate them with commas)"
        )
    if token_file is not None and not token_file.expanduser().is_file():
        raise fail(f"--token-file {token_file}: no such file")
    if ca is not None and not ca.expanduser().is_file():
        raise fail(f"--ca {ca}: no such file (the CA is SERVER_HOME/pki/ca.crt on the server)")
    config = ClientConfig.load()
    old = config.contexts.get(name)
    if old is None and server is None:
        raise fail(f"context {name} is new: give its --server URL")
    new = Context(
        name,
        server or (old.server if old else ""),
        token if token is not None else (old.token if old and token_file is None else None),
        str(token_file.expanduser().resolve())
        if token_file is not None
        else (old.token_file if old and token is None else None),
        str(ca.expanduser().resolve()) if ca is not None else (old.ca if old else None),
    )
    config.contexts[name] = new
    was_current = config.current
    if use:
        config.current = name
    config.save()
    verb = "created" if old is None else "updated"
    console.print(
        f"context {name} {verb} in {config.path}: {new.server}, token {_token_text(new)}"
        + (f", CA {new.ca}" if new.ca else ""),
        markup=False,
    )
    console.print(_current_text(name, use, was_current), markup=False)
    _note_overrides()


def _current_text(name: str, use: bool, was: str | None) -> str:
    """Whether ``name`` is the current context after `set-context` (``was``: the one before)."""
    if use and was == name:
        return f"{name} is still the current context"
    if use:
        return f"{name} is now the current context" + (f" (was {was})" if was else "")
    if was == name:
        return f"{name} is the current context"
    if was is None:
        return f"no current context is set: `shoal config use-context {name}` (or --use) sets it"
    return f"the current context is still {was}: `shoal config use-context {name}` switches"


def _note_overrides() -> None:
    """The current context is not what commands use when the environment names another."""
    for key in ("SHOAL_CONTEXT", "SHOAL_URL"):
        if os.environ.get(key):
            err_console.print(
                f"note: ${key} is set ({os.environ[key]}): commands use it, not the current "
                "context",
                markup=False,
            )
            return


@config_app.command("use-context")
@api_errors
def use_context(
    name: str = typer.Argument(..., help="Context name (`local`: $SHOAL_HOME)."),
) -> None:
    """Make NAME the current context."""
    config = ClientConfig.load()
    if name != LOCAL:
        config.get(name)
    config.current = name
    config.save()
    console.print(f"current context: {name}", markup=False)


@config_app.command("current-context")
@api_errors
def current_context() -> None:
    """Print the current context (exit 1 if none is set)."""
    config = ClientConfig.load()
    if config.current is None:
        raise fail(f"no current context is set in {config.path}")
    typer.echo(config.current)


@config_app.command("delete-context")
@api_errors
def delete_context(name: str = typer.Argument(..., help="Context name.")) -> None:
    """Delete a context (if it was current, no context is current any more)."""
    config = ClientConfig.load()
    config.get(name)
    del config.contexts[name]
    if config.current == name:
        config.current = None
    config.save()
    console.print(f"context {name} deleted", markup=False)


@config_app.command("view")
@api_errors
def view(output: OutputFormat = OUTPUT_OPTION) -> None:
    """The config file's contents, tokens masked."""
    config = ClientConfig.load()
    contexts = []
    for c in sorted(config.contexts.values(), key=lambda c: c.name):
        data = c.as_yaml()
        if "token" in data:
            data["token"] = mask(c.token)
        contexts.append(data)
    shown: dict[str, object] = {"current-context": config.current, "contexts": contexts}
    if output is OutputFormat.JSON:
        print_json(shown)
        return
    import yaml

    typer.echo(f"# {config.path}")
    typer.echo(yaml.safe_dump(shown, sort_keys=False), nl=False)


@api_errors
def whoami(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Who the server thinks you are: user, admin, groups, and which server, context and token."""
    endpoint = discover()
    me = ShoalClient.for_endpoint(endpoint).me()
    data = {
        "user": me["name"],
        "admin": me["admin"],
        "groups": me["groups"],
        "tokenKind": me["tokenKind"],
        "server": endpoint.url,
        "serverFrom": endpoint.url_source,
        "context": endpoint.context,
        "tokenFrom": endpoint.token_source,
    }
    if output is OutputFormat.JSON:
        print_json(data)
        return
    lines = [
        ("user", f"{me['name']} ({me['tokenKind']} token)"),
        ("admin", "yes" if me["admin"] else "no"),
        ("groups", ", ".join(me["groups"]) or "-"),
        ("server", f"{endpoint.url} (from {endpoint.url_source})"),
        ("context", endpoint.context or "-"),
        ("token", f"from {endpoint.token_source}" if endpoint.token_source else "none sent"),
    ]
    for key, value in lines:
        console.print(f"{key + ':':<9}{value}", markup=False)


@api_errors
def login(
    token: str = typer.Option(
        ...,
        "--token",
        prompt=True,
        hide_input=True,
        help="An API token (e.g. from `shoal user create`).",
    ),
    context: str | None = typer.Option(
        None, "--context", help="Store it in this context (made current); new ones need --server."
    ),
    server: str | None = typer.Option(None, "--server", help="Server URL of a new --context."),
) -> None:
    """Check a token against the server and store it (mode 0600) where the CLI will find it."""
    if server is not None and context is None:
        raise fail("--server needs --context NAME: the context the server and token are saved in")
    if context is not None and context != LOCAL:
        _login_context(context, server, token)
        return
    endpoint = discover(context=context)
    if endpoint.context is None:
        raise fail(
            f"the server comes from {endpoint.url_source}: save the token in a context instead "
            "(`shoal login --context NAME --server URL`) or set $SHOAL_TOKEN"
        )
    if endpoint.context != LOCAL:
        _login_context(endpoint.context, None, token)
        return
    who = _check_token(endpoint.url, token, endpoint.ca)
    path = default_home() / "token"
    write_secret_file(path, token)
    console.print(f"logged in to {endpoint.url} as {who}; token stored in {path}", markup=False)


def _check_token(url: str, token: str, ca: str | None = None) -> str:
    who = ShoalClient(url, token, token_source="--token", ca=ca).me()
    if who["tokenKind"] == "agent":
        raise fail("that is an agent token; log in with a user token")
    return str(who["name"])


def _login_context(name: str, server: str | None, token: str) -> None:
    _check_name(name)
    config = ClientConfig.load()
    old = config.contexts.get(name)
    url = server or (old.server if old else None)
    if url is None:
        raise fail(f"context {name} is new: give its --server URL")
    ca = old.ca if old else None
    who = _check_token(url, token, ca)
    config.contexts[name] = Context(name, url, token, None, ca)
    config.current = name
    config.save()
    console.print(
        f"logged in to {url} as {who}; token stored in context {name} ({config.path}), "
        "now the current context",
        markup=False,
    )
    if old is not None and old.token_file is not None:
        err_console.print(f"note: context {name} no longer reads {old.token_file}")


@api_errors
def logout() -> None:
    """Forget the token saved for the current context (`shoal --context NAME logout`: that one's),
    as `shoal login` saved it; says what was removed. The server is not asked."""
    chosen = clientconfig.selected_context or os.environ.get("SHOAL_CONTEXT") or None
    if chosen is None and os.environ.get("SHOAL_URL"):
        raise fail(
            "the server comes from $SHOAL_URL and its token from $SHOAL_TOKEN, if set: nothing "
            "is saved for it; unset SHOAL_TOKEN to stop sending a token"
        )
    config = ClientConfig.load()
    name = chosen or config.current or LOCAL
    said = _forget_local_token() if name == LOCAL else _forget_context_token(config, name)
    console.print(said, markup=False)
    if os.environ.get("SHOAL_TOKEN"):
        err_console.print("note: $SHOAL_TOKEN is set: commands still send that token")


def _forget_local_token() -> str:
    home = default_home()
    saved, admin = home / "token", home / "admin.token"
    left = (
        f"; {admin} (the cluster's admin token, `shoal up` wrote it) is used now"
        if admin.exists()
        else ""
    )
    if not saved.exists():
        return f"nothing to forget: no token saved by `shoal login` in {home}{left}"
    saved.unlink()
    return f"logged out of the local cluster under {home}: removed the token in {saved}{left}"


def _forget_context_token(config: ClientConfig, name: str) -> str:
    context = config.get(name)
    if context.token is None and context.token_file is None:
        return f"nothing to forget: context {name} has no saved token ({config.path})"
    if context.token is not None:
        removed = f"removed its token from {config.path}"
    else:
        removed = (
            f"it no longer reads its token from {context.token_file} (the file itself is left)"
        )
    config.contexts[name] = replace(context, token=None, token_file=None)
    config.save()
    return f"logged out of context {name} ({context.server}): {removed}"


def _urls(server: str) -> bool:
    """True if ``server`` is one URL, or several separated by commas."""
    urls = [part.strip() for part in server.split(",")]
    return all(url.startswith(("http://", "https://")) for url in urls)
