"""The shapes of names in a job (job, role, port label, environment variable), with no
dependencies: the CLI checks `--env NAME=VALUE` with them before it loads pydantic."""

from __future__ import annotations

import re

JOB_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
PAI_JOB_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,255}$"
ROLE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
PORT_LABEL_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,31}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A data set: NAME (the submitter's) or OWNER/NAME (another user's, shared with the submitter).
DATA_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
DATA_REF_PATTERN = r"^(?:[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"

JOB_NAME_RE = re.compile(JOB_NAME_PATTERN)
ROLE_NAME_RE = re.compile(ROLE_NAME_PATTERN)
PORT_LABEL_RE = re.compile(PORT_LABEL_PATTERN)
ENV_NAME_RE = re.compile(ENV_NAME_PATTERN)
DATA_NAME_RE = re.compile(DATA_NAME_PATTERN)
DATA_REF_RE = re.compile(DATA_REF_PATTERN)
