"""``shoal admin``: operators' commands (backup and restore of the store, the audit log, the
cluster's CA)."""

from __future__ import annotations

import typer

from shoal.cli import audit_command, backup_commands, ca_commands

admin_app = typer.Typer(
    help="Operators' commands: back up and restore the store, read the audit log, rotate the "
    "cluster's CA.",
    no_args_is_help=True,
)

admin_app.command("audit")(audit_command.audit)
admin_app.command()(backup_commands.backup)
admin_app.command()(backup_commands.restore)
admin_app.add_typer(ca_commands.ca_app, name="ca")
