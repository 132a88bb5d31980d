"""Each pool's offers, cheapest first, and what one more machine of the pool would be."""

from __future__ import annotations

from dataclasses import dataclass

from shoal.cloud.pools import PoolSpec
from shoal.cloud.provider import Offer, Provider, ProviderError
from shoal.core.autoscale import PoolTemplate
from shoal.core.resources import ResourceVector

OFFERS_FRESH_S = 60.0  # offers are asked for again after this long


def offer_id(provider: str, offer: Offer) -> str:
    """How an offer is named in blocks: ``provider:region/zone/type[/spot]``."""
    return f"{provider}:{offer.key}"


def matching(pool: PoolSpec, offers: list[Offer]) -> list[Offer]:
    """The offers that serve ``pool`` (its type, zones, spot, requirements), cheapest first."""
    found = []
    for offer in offers:
        if pool.instance_type is not None and offer.instance_type != pool.instance_type:
            continue
        if pool.zones and offer.zone not in pool.zones:
            continue
        if offer.spot != pool.spot or offer.available is False:
            continue
        if pool.cpu_millis is not None and offer.cpu_millis < pool.cpu_millis:
            continue
        if pool.memory_mib is not None and offer.memory_mib < pool.memory_mib:
            continue
        if pool.gpus is not None and offer.gpus < pool.gpus:
            continue
        if pool.gpu_type is not None and offer.gpu_type != pool.gpu_type:
            continue
        found.append(offer)
    return sorted(found, key=lambda o: (o.price_per_hour, o.key))


@dataclass
class PoolOffers:
    """A pool's offers as last asked for (``error``: why asking failed)."""

    offers: list[Offer]
    asked_at: float
    error: str | None = None


class OfferBook:
    """Offers per pool, asked for at most every ``OFFERS_FRESH_S``."""

    def __init__(self) -> None:
        self._pools: dict[str, PoolOffers] = {}

    def known(self, pool: str) -> list[Offer]:
        """The pool's offers as last asked for (none yet: empty)."""
        found = self._pools.get(pool)
        return [] if found is None else list(found.offers)

    def for_pool(self, pool: PoolSpec, provider: Provider, now: float) -> PoolOffers:
        known = self._pools.get(pool.name)
        if known is not None and now - known.asked_at < OFFERS_FRESH_S and known.offers:
            return known
        try:
            offers = provider.offers(pool.instance_type, pool.zones, pool.spot)
            known = PoolOffers(matching(pool, offers), now)
        except ProviderError as exc:
            known = PoolOffers(known.offers if known else [], now, f"{exc.kind}: {exc.message}")
        self._pools[pool.name] = known
        return known


def template_of(pool: PoolSpec, offers: list[Offer], target: int | None) -> PoolTemplate:
    """One machine of the pool, as its cheapest usable offer describes it; with no such offer,
    a pool that cannot grow now (its machines still shrink)."""
    cheapest = offers[0] if offers else None
    return PoolTemplate(
        name=pool.name,
        capacity=ResourceVector()
        if cheapest is None
        else ResourceVector(cheapest.cpu_millis, cheapest.memory_mib, cheapest.gpus),
        price_per_hour=0.0 if cheapest is None else cheapest.price_per_hour,
        min_nodes=pool.min_nodes,
        max_nodes=pool.max_nodes,
        idle_timeout_s=pool.idle_timeout_s,
        join_timeout_s=pool.join_timeout_s,
        gpu_type=None if cheapest is None else cheapest.gpu_type,
        target=target,
        can_grow=cheapest is not None,
    )


def gone_pool(name: str) -> PoolTemplate:
    """A pool no longer in the cloud file: its machines are drained and terminated once idle."""
    return PoolTemplate(name, ResourceVector(), 0.0, 0, 0, 0.0, 0.0, can_grow=False)
