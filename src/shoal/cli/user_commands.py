"""``shoal user ...`` and ``shoal token ...`` (``shoal login``: config_commands.py)."""

from __future__ import annotations

import time

import typer

from shoal.cli.changes_view import print_changes
from shoal.cli.columns import Column, table_text, terminal_width
from shoal.cli.common import OUTPUT_OPTION, OutputFormat, api_errors, client, emit, fail, print_json
from shoal.cli.render import console, new_table

user_app = typer.Typer(help="Users (admins).", no_args_is_help=True)
token_app = typer.Typer(help="Your API tokens.", no_args_is_help=True)
USER_NAME = typer.Argument(..., help="The user's name (`shoal user list`).")


@user_app.command("create")
@api_errors
def create_user(
    name: str = typer.Argument(..., help="The new user's name."),
    admin: bool = typer.Option(False, "--admin", help="Make the user an admin."),
    groups: str = typer.Option("", "--groups", help="Comma-separated groups."),
    password: str | None = typer.Option(None, "--password", help="For OpenPAI-style login."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Create a user and print their first token (shown only once)."""
    made = client().create_user(name, admin, [g for g in groups.split(",") if g], password)
    if emit({"name": made["name"], "token": made["token"], "admin": made["admin"]}, output):
        return
    console.print(f"user {made['name']} created; their token (shown only once):")
    console.print(made["token"], markup=False)


_USER_COLUMNS = [Column("NAME"), Column("ROLE"), Column("GROUPS")]


@user_app.command("list")
@api_errors
def list_users(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Every user with their role (admin or user) and groups (admins)."""
    rows = client().users()
    if emit(rows, output):
        return
    cells = [
        [row["name"], "admin" if row["admin"] else "user", ",".join(row["groups"]) or "-"]
        for row in rows
    ]
    width = None if output is OutputFormat.WIDE else terminal_width()
    typer.echo(table_text(_USER_COLUMNS, cells, width))


@user_app.command("update")
@api_errors
def update_user(
    name: str = USER_NAME,
    admin: bool | None = typer.Option(None, "--admin/--no-admin", help="Grant or drop admin."),
    groups: str | None = typer.Option(None, "--groups", help="Replace the groups: a,b."),
    add_group: list[str] = typer.Option([], "--add-group", help="Add a group."),
    remove_group: list[str] = typer.Option([], "--remove-group", help="Remove a group."),
    password: str | None = typer.Option(None, "--password", help="Set a new password."),
    clear_password: bool = typer.Option(
        False, "--clear-password", help="Remove the password (no OpenPAI-style login)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the change; write nothing."),
    output: OutputFormat = OUTPUT_OPTION,
) -> None:
    """Change a user (admins): only the settings given change."""
    if password is not None and clear_password:
        raise typer.BadParameter("give --password or --clear-password, not both")
    sdk = client()
    patch: dict[str, object] = {}
    if admin is not None:
        patch["admin"] = admin
    if groups is not None or add_group or remove_group:
        if groups is not None:
            names = [g.strip() for g in groups.split(",") if g.strip()]
        else:
            names = next((u["groups"] for u in sdk.users() if u["name"] == name), [])
        names += [g for g in add_group if g not in names]
        patch["groups"] = [g for g in names if g not in remove_group]
    if password is not None or clear_password:
        patch["password"] = password
    if not patch:
        raise fail(
            f"nothing to change: give at least one setting (see `shoal user update {name} --help`)"
        )
    result = sdk.patch_user(name, patch, dry_run=dry_run)
    if output is OutputFormat.JSON:
        print_json(result)
        return
    print_changes(f"user {name}", result, str)


@user_app.command("delete")
@api_errors
def delete_user(
    name: str = USER_NAME,
    stop_jobs: bool = typer.Option(
        False, "--stop-jobs", help="Stop the user's active jobs first (else they block it)."
    ),
) -> None:
    """Delete a user and revoke all their tokens; their finished jobs stay listed."""
    result = client().delete_user(name, stop_jobs=stop_jobs)
    stopped = (result or {}).get("stoppedJobs") or []
    suffix = f"; stopped job(s) {', '.join(stopped)}" if stopped else ""
    console.print(f"user {name} deleted{suffix}", markup=False)


@token_app.command("create")
@api_errors
def create_token(
    label: str = typer.Option(
        "", "--label", help="A note to tell your tokens apart (`shoal token list` shows it)."
    ),
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
    if emit(made, output):
        return
    console.print(f"token {made['id']} ({made['kind']}):")
    console.print(made["token"], markup=False)


@token_app.command("list")
@api_errors
def list_tokens(output: OutputFormat = OUTPUT_OPTION) -> None:
    """Your tokens, without their secret values."""
    rows = client().tokens()
    if emit(rows, output):
        return
    table = new_table()
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
def revoke_token(
    token_id: int = typer.Argument(..., help="The token's id (`shoal token list`)."),
) -> None:
    """Revoke one of your tokens (admins: anyone's): it is refused from now on."""
    client().revoke_token(token_id)
    console.print(f"token {token_id} revoked")
