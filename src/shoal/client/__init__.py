"""shoal's SDK: a client of the REST API, used by the CLI and usable from scripts.

    from shoal.client import ShoalClient
    client = ShoalClient.from_environment()
    job = client.submit(open("job.yaml").read())[0]
    client.wait(job["id"])

- ``sdk``: :class:`ShoalClient` (one class: the calls of ``accounts``, ``images``, ``metrics``,
  ``cluster_admin`` and ``interactive`` are its mixins), :class:`Endpoint` and :func:`discover`;
- ``config``: contexts and where the CLI finds its server and token (``shoal config``);
- ``transport``: the HTTP client (TLS, the CA to trust) and the errors it raises.

The CLI imports this package at start-up: nothing here may import the server, the store or
pydantic (tests/cli/test_cli_imports.py), and httpx loads with the first client.
"""

from shoal.client.sdk import TERMINAL, Endpoint, ShoalClient, discover
from shoal.client.transport import ServerUnavailable, ShoalError, UntrustedServer

__all__ = [
    "TERMINAL",
    "Endpoint",
    "ServerUnavailable",
    "ShoalClient",
    "ShoalError",
    "UntrustedServer",
    "discover",
]
