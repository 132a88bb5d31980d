"""Bootstrap a cluster over SSH (``shoal cluster create|status|delete``), as MARO's ``grass
create`` / ``node join`` do: read a cluster file, start the server on this machine, install shoal
on each host from local wheels (no internet on the hosts), join it and start its agent.

- ``clusterfile``: the cluster file (validation with field-named problems) and its template;
- ``ssh``: one SSH connection per host (asyncssh): run, copy, start detached, stop by pid file;
- ``hostctl``: the stdlib-only helper copied to every host (start/stop/status by pid file);
- ``wheels``: the shoal wheel built from this checkout, and the wheelhouse of its dependencies;
- ``server``: the local server (init, start in the background, join tokens, node states);
- ``hosts``: the per-host steps of create, status and delete.

The CLI (``shoal.cli.cluster_ssh_commands``) imports this package only inside its commands.
"""
