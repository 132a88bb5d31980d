"""Trace-driven simulation: replay a job trace against a cluster description with the same
``core.schedule`` the server runs. Entry point: ``shoal sim`` (cli/sim_command.py)."""
