"""OpenPAI's ``GET /api/v2/jobs/{job}/ssh`` (docs/ssh.md): the job's containers with their ssh
address and port, and where its key pair is, in the shape OpenPAI's REST server documented
(``containers[].{id, sshIp, sshPort}``, ``keyPair.{folderPath, publicKeyFileName,
privateKeyFileName, privateKeyDirectDownloadLink}``). A job without the ssh plugin is a 404
``NoJobSshInfoError``, as OpenPAI answered. The addresses are the nodes' own: from outside the
cluster, ``shoal job ssh`` reaches a task through the server instead."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from shoal.server.context import ApiError
from shoal.server.deps import Caller, Context
from shoal.server.openpai.errors import answering
from shoal.server.openpai.lookup import find_job
from shoal.server.services.job_ssh import current_tasks, ssh_port, ssh_spec

router = APIRouter(prefix="/api/v2", tags=["openpai"])


@router.get("/jobs/{framework}/ssh", response_model=None)
def get_ssh_info(framework: str, request: Request, ctx: Context, caller: Caller) -> dict[str, Any]:
    with answering(404), ctx.db.read() as session:
        job = find_job(session, caller, framework)
        if ssh_spec(job) is None:
            raise ApiError(404, "NoJobSshInfoError", f"SSH info of job {framework} is not found.")
        containers = [
            {"id": task.attempt_id, "sshIp": task.address, "sshPort": str(port)}
            for task in current_tasks(session, job)
            if (port := ssh_port(task)) is not None
        ]
        base = str(request.base_url).rstrip("/")
        folder = f"{base}/api/v1/jobs/{job.id}/ssh"
        file_name = f"{job.user}~{job.name}"
        return {
            "containers": containers,
            "keyPair": {
                "folderPath": folder,
                "publicKeyFileName": f"{file_name}.pub",
                "privateKeyFileName": file_name,
                "privateKeyDirectDownloadLink": f"{folder}/private-key",
            },
        }
