"""``shoal user ...`` and ``shoal token ...`` (``shoal login``: config_commands.py)."""

from __future__ import annotations

import time

import typer
from rich.table import Table

from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, print_json
from shoal.cli.render import console

user_app = typer.Typer(help="Users (admins).", no_args_is_help=True)
token_app = typer.Typer(help="Your API tokens.", no_args_is_help=True)


@user_app.command("create")
@api_errors
def create_user(
    name: str,
    admin: bool = typer.Option(False, "--admin", help="Make the user an admin."),
    groups: str = typer.Option("", "--groups", help="Comma-separated groups."),
    password: str | None = typer.Option(None, "--password", help="For OpenPAI-style login."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Create a user and print their first token (shown only once)."""
    made = client().create_user(name, admin, [g for g in groups.split(",") if g], password)
    if output is OutputFormat.JSON:
        print_json({"name": made["name"], "token": made["token"], "admin": made["admin"]})
        return
    console.print(f"user {made['name']} created; their token (shown only once):")
    console.print(made["token"], markup=False)


@user_app.command("list")
@api_errors
def list_users(output: OutputFormat = OUTPUT_OPTION) -> None:
    rows = client().users()
    if output is OutputFormat.JSON:
        print_json(rows)
        return
    for row in rows:
        role = "admin" if row["admin"] else "user"
        console.print(f"{row['name']}  {role}  {','.join(row['groups'])}", markup=False)


@user_app.command("delete")
@api_errors
def delete_user(name: str) -> None:
    """Delete a user and revoke all their tokens."""
    client().delete_user(name)
    console.print(f"user {name} deleted")


@token_app.command("create")
@api_errors
def create_token(
    label: str = typer.Option("", "--label"),
    expires: str | None = typer.Option(None, "--expires", help="e.g. 3600, 12h, 30d."),
    application: bool = typer.Option(False, "--application", help="Job operations only."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """A new token for yourself (printed once; only its hash is stored)."""
    from shoal.spec import units

    seconds = None
    if expires is not None:
        try:
            seconds = float(units.duration_seconds(int(expires) if expires.isdigit() else expires))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--expires") from None
    made = client().create_token(label, seconds, application)
    if output is OutputFormat.JSON:
        print_json(made)
        return
    console.print(f"token {made['id']} ({made['kind']}):")
    console.print(made["token"], markup=False)


@token_app.command("list")
@api_errors
def list_tokens(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Your tokens, without their secret values."""
    rows = client().tokens()
    if output is OutputFormat.JSON:
        print_json(rows)
        return
    table = Table(show_edge=False, pad_edge=False)
    for column in ("id", "user", "kind", "label", "expires", "revoked"):
        table.add_column(column)
    for t in rows:
        expires = (
            "never"
            if t["expiresAt"] is None
            else time.strftime("%Y-%m-%d %H:%M", time.localtime(t["expiresAt"]))
        )
        table.add_row(
            str(t["id"]), t["user"], t["kind"], t["label"], expires, "yes" if t["revoked"] else ""
        )
    console.print(table)


@token_app.command("revoke")
@api_errors
def revoke_token(token_id: int) -> None:
    client().revoke_token(token_id)
    console.print(f"token {token_id} revoked")
