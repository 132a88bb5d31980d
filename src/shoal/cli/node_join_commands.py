"""``shoal node token create|list|revoke`` (join tokens) and ``shoal node remove`` (admins)."""

from __future__ import annotations

import time

import typer

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail
from shoal.cli.render import console, new_table

token_app = typer.Typer(
    help="Join tokens: how machines join a server on the network.", no_args_is_help=True
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> float | None:
    """``90s``, ``30m``, ``1h``, ``7d`` or a number of seconds; ``0``/``never``: no expiry."""
    text = text.strip().lower()
    if text in ("0", "never"):
        return None
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise typer.BadParameter(
            f"{text!r}: write 90s, 30m, 1h, 7d or never", param_hint="--ttl"
        ) from None
    if value <= 0:
        raise typer.BadParameter(f"{text!r}: must be positive (or never)", param_hint="--ttl")
    return value


@token_app.command("create")
@api_errors
def create(
    ttl: str = typer.Option("1h", "--ttl", help="Valid for: 90s, 30m, 1h, 7d, or never."),
    uses: int = typer.Option(1, "--uses", min=0, help="How many nodes may join (0: any)."),
) -> None:
    """Make a join token (admins) and print the one command a machine joins with."""
    ttl_s = parse_ttl(ttl)  # a typo is named before any server is asked
    api = client()
    made = api.create_join_token(ttl_s, uses or None)
    url = made.get("serverUrl") or api.url
    expiry = (
        "never expires"
        if made["expiresAt"] is None
        else f"expires {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(made['expiresAt']))}"
    )
    count = "any number of nodes" if made["maxUses"] is None else f"{made['maxUses']} node(s)"
    console.print(
        f"join token {made['id']}: {count}, {expiry}; run on the machine:",
        markup=False,
        highlight=False,
    )
    typer.echo(f"shoal agent join {url} --token {made['token']}")


@token_app.command("list")
@api_errors
def list_tokens(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Join tokens (their secrets are never shown again): state, uses, expiry."""
    tokens = client().join_tokens()
    if emit(tokens, output):
        return
    table = new_table()
    for column in ("id", "state", "uses", "expires", "created by"):
        table.add_column(column)
    for t in tokens:
        limit = "∞" if t["maxUses"] is None else str(t["maxUses"])
        expires = (
            "never"
            if t["expiresAt"] is None
            else time.strftime("%m-%d %H:%M:%S", time.localtime(t["expiresAt"]))
        )
        table.add_row(t["id"], t["state"], f"{t['uses']}/{limit}", expires, t["createdBy"])
    console.print(table)


@token_app.command("revoke")
@api_errors
def revoke(
    token_id: str = typer.Argument(..., help="The token's id (`shoal node token list`)."),
) -> None:
    """No machine can join with this token any more (nodes that joined with it stay)."""
    client().revoke_join_token(token_id)
    console.print(f"join token {token_id} revoked", markup=False)


@api_errors
def remove(
    name: str = typer.Argument(..., help="The node."),
    force: bool = typer.Option(
        False, "--force", help="Even with tasks there: fencing stops them, then it is removed."
    ),
) -> None:
    """Revoke NODE's certificate and remove it (admins); its agent is refused from then on.
    Refused while tasks run there, unless --force (fencing stops them; they end as lost)."""
    if not name:
        raise fail("give the node's name")
    result = client().remove_node(name, force)
    if result.get("pending"):
        console.print(
            f"node {name}: certificate revoked, cordoned; its {result['stoppedTasks']} task(s) "
            "are stopped by fencing and end as lost when it goes NOT_READY (after the node "
            "timeout), then it is removed",
            markup=False,
        )
        return
    stopped = f"; {result['stoppedTasks']} task(s) stopped" if result["stoppedTasks"] else ""
    console.print(f"node {name} removed, its certificate revoked{stopped}", markup=False)
