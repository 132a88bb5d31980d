"""Cloud node pools: machines shoal creates when jobs wait and removes when idle (docs/cloud.md).

``provider.py`` is the one interface every cloud implements (offers, launch, terminate, list,
polled errors); ``pools.py`` reads the cloud file (providers and pools); ``bootstrap.py`` renders
the user data a new machine joins with; ``local/`` is the provider whose machines are network
namespaces running real agents; ``azure.py`` the Azure provider (the ``azure`` extra). What to
launch and what to remove is decided by the pure ``shoal.core.autoscale``; the server's
``services/autoscaler.py`` applies it.
"""
