"""Kubernetes as a place shoal runs jobs (docs/kubernetes.md).

shoal keeps the decisions (queue, virtual clusters, gangs, preemption); Kubernetes runs the Pods.
The seam is the agent protocol (``shoal.protocol``): the Kubernetes agent (``agent.py``) is an
agent like any other to the server, whose nodes are the cluster's Nodes and whose launches create
Pods bound to the node shoal chose. Only its fencing differs (``fencing="confirmed"``): nothing
stops a Pod when shoal loses touch with it, so its task ends only when the agent confirms the Pod
is gone.

- ``options.py``: what the user configures (kubeconfig, namespace, node selector, network mode);
- ``nodes.py``: a Node (and what other Pods request on it) as an ``AgentNode``; pure;
- ``pods.py``: a launch order as a Pod, its Secret and its job's owner ConfigMap; pure;
- ``status.py``: a Pod's phase and container states as shoal's running and exit reports; pure;
- ``watch.py``: list-then-watch caches (resourceVersion, relist on 410 Gone, backoff);
- ``logs.py``, ``exec.py``: ``pods/log`` shipped to the server, ``pods/exec`` relayed;
- ``agent.py``: the loops that tie these to the server.

The ``kubernetes`` client is imported only here (``pip install 'shoal[kubernetes]'``)."""
