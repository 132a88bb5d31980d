"""The one place providers plug in: a provider section of the cloud file -> a ``Provider``.

Kubernetes plugs in beside shoal's agents as another agent (docs/architecture.md); a cloud plugs
in here, below the autoscaler: the machines it creates run shoal's own agent, so the rest of
shoal sees nodes like any other. SDKs are imported only when their provider is made.
"""

from __future__ import annotations

from shoal.cloud.pools import AzureProviderSection, LocalProviderSection, ProviderSection
from shoal.cloud.provider import Provider


def make_provider(name: str, section: ProviderSection) -> Provider:
    if isinstance(section, LocalProviderSection):
        from shoal.cloud.local.client import LocalProvider  # noqa: PLC0415 - httpx client

        return LocalProvider(name, section.endpoint)
    if isinstance(section, AzureProviderSection):
        from shoal.cloud.azure import AzureProvider  # noqa: PLC0415 - the azure extra

        return AzureProvider(section, name=name)
    raise ValueError(f"provider {name!r}: unknown type")  # pragma: no cover - pydantic refuses it
