"""The local provider: a cloud whose machines are Linux network namespaces on a bridge, each
running its user data (a real shoal agent) with the fault model of a real cloud: prices, zone
capacity, quotas, a boot delay, scheduled preemptions with Azure-shaped notices, and launches
that never boot. ``shoal cloud local serve`` runs it (``daemon``); ``LocalProvider`` talks to it
(``client``). See docs/cloud.md, "The local provider"."""
