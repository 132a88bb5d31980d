"""The keys a job with OpenPAI's ``ssh`` runtime plugin gets when it is submitted (docs/ssh.md).

Each such job gets two ed25519 key pairs of its own: the host key every task's sshd presents
(published by ``GET /api/v1/jobs/{job}/ssh``, so ``shoal job ssh`` checks it) and the job key its
tasks log in to each other with (``jobssh``). The private halves are kept with the job's secrets
(never shown; filled in by the agent when a task starts), the public ones in the job's variables,
with the keys its user registered (``services.ssh_keys``).
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.orm import Session

from shoal.server.services.ssh_keys import authorized_keys
from shoal.spec import openpai_ssh as plugin
from shoal.spec.model import JobSpec


def new_key_pair(comment: str) -> tuple[str, str]:
    """A fresh ed25519 key pair: (private key in OpenSSH's format, public key line)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private.strip(), f"{public.decode()} {comment}"


def with_job_keys(session: Session, user: str, spec: JobSpec) -> JobSpec:
    """``spec`` with its own keys and the user's registered ones, if it runs the ssh plugin."""
    if not plugin.uses_ssh(spec):
        return spec
    host_private, host_public = new_key_pair(f"shoal-host:{user}~{spec.name}")
    job_private, job_public = new_key_pair(f"shoal-job:{user}~{spec.name}")
    env = {
        **spec.env,
        plugin.HOST_PUBLIC_KEY_VAR: host_public,
        plugin.JOB_PUBLIC_KEY_VAR: job_public,
        plugin.AUTHORIZED_KEYS_VAR: "\n".join(authorized_keys(session, user)),
    }
    secrets = {
        **spec.secrets,
        plugin.HOST_KEY_SECRET: host_private,
        plugin.JOB_KEY_SECRET: job_private,
    }
    return spec.model_copy(update={"env": env, "secrets": secrets})
