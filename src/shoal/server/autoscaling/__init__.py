"""The autoscaler in the server (docs/cloud.md): reads what waits and what runs from the store,
asks the pure ``shoal.core.autoscale`` what to do, and does it through the providers.

* ``rows.py``: the ``cloud_instances`` rows, offer blocks, pool targets, and the events and audit
  rows each step writes;
* ``offers.py``: each pool's offers (cheapest first), what one machine of it is;
* ``launching.py``: launching one machine (one-time join token, user data, failover over offers);
* ``reconcile.py``: the store against the providers' lists (after a restart, after errors);
* ``autoscaler.py``: one pass, and the thread that runs a pass every few seconds.
"""
