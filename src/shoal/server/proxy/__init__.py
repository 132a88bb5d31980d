"""Reaching a running task's ports through the server (docs/proxy.md).

- ``streams``: a tunnel to a task's port as a byte stream, over the task agent's WebSocket;
- ``http_forward``: HTTP requests forwarded over pooled tunnels (httpcore with a tunnel backend);
- ``ws_forward``: WebSockets forwarded over a tunnel (the websockets library's client protocol);
- ``routes``: the user's tunnel WebSocket (port-forward, ssh), the agent's attach, the proxy;
- ``listener``: the proxy's own port, so proxied pages never share the dashboard's origin.
"""
