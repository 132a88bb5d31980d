"""What MARO's job readers share: strictness, modes, hints and field types."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from shoal.spec.model import MAX_INSTANCES_PER_ROLE
from shoal.spec.patterns import JOB_NAME_PATTERN, ROLE_NAME_PATTERN

STRICT = ConfigDict(extra="forbid", strict=True)
OPEN = ConfigDict(extra="allow", strict=True)  # RL configs: unread keys pass through

PROCESS_MODE = "process"
GRASS_MODES = ("grass/azure", "grass/on-premises", "grass/local")
K8S_MODE = "k8s/aks"
MARO_MODES = (PROCESS_MODE, *GRASS_MODES, K8S_MODE)
MARO_PACKAGE_HINT = "install MARO in the task's environment (pip install pymaro) or its image"
ASSUMED = "declares no resources, so shoal assumes 1 cpu / 1 GiB per instance"
ASSUMED_HINT = "convert to a shoal job to declare resources per role"

JobName = Annotated[str, Field(pattern=JOB_NAME_PATTERN)]
RoleName = Annotated[str, Field(pattern=ROLE_NAME_PATTERN)]
Instances = Annotated[int, Field(ge=1, le=MAX_INSTANCES_PER_ROLE)]
Port = Annotated[int, Field(ge=1, le=65535)]
NonEmpty = Annotated[str, Field(min_length=1)]
LogLevel = Literal["DEBUG", "INFO", "WARN", "ERROR", "CRITICAL", "PROGRESS"]
