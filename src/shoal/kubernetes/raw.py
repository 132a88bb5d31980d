"""Kubernetes objects as the API server sent them (JSON), read the way the client's models are.

The client's models cost about 2 ms to build per Pod, and the agent's watches see every Pod
several times (created, bound, started, ended, deleted): at a thousand Pods a minute that was
most of the agent's CPU (docs/benchmarks.md, "Kubernetes"). ``Obj`` wraps the parsed JSON and
builds nothing up front: ``pod.spec.node_name`` reads ``pod["spec"]["nodeName"]`` when asked,
timestamps become ``datetime`` when read, and free-form maps (labels, annotations, resource
lists) are the plain dicts the models also give.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

# Fields that are maps of arbitrary keys (the models' ``dict(str, str)``): kept as dicts.
MAPS = frozenset(
    {"labels", "annotations", "allocatable", "capacity", "requests", "limits", "data",
     "node_selector", "overhead", "string_data", "binary_data"}
)  # fmt: skip
# Field names whose JSON spelling is not plain camelCase.
IRREGULAR = {"pod_ip": "podIP", "host_ip": "hostIP", "pod_ips": "podIPs", "host_ips": "hostIPs"}
_keys: dict[str, str] = dict(IRREGULAR)


def _json_key(name: str) -> str:
    key = _keys.get(name)
    if key is None:
        first, *rest = name.split("_")
        key = _keys[name] = first + "".join(part[:1].upper() + part[1:] for part in rest)
    return key


def _is_time(name: str) -> bool:
    return name.endswith(("_at", "_timestamp", "_time"))


def _wrap(name: str, value: Any) -> Any:
    if value is None or name in MAPS:
        return value
    if isinstance(value, dict):
        return Obj(value)
    if isinstance(value, list):
        return [Obj(item) if isinstance(item, dict) else item for item in value]
    if isinstance(value, str) and _is_time(name):
        return datetime.fromisoformat(value)
    return value


class Obj:
    """One object (or part of one) as served; a missing field reads as None, as in the models."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _wrap(name, self.raw.get(_json_key(name)))

    def __repr__(self) -> str:
        return f"Obj({self.raw!r})"

    def to_dict(self) -> dict[str, Any]:
        return self.raw


def read(response: Any) -> Obj:
    """A raw answer (``_preload_content=False``) read to its end and parsed."""
    try:
        return Obj(json.loads(response.data))
    finally:
        response.release_conn()
