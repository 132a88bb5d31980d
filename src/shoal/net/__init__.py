"""HTTP plumbing the CLI's client and the agent share, loading neither side's packages (not the
SDK, not the wire types' pydantic): several servers behind one client (``failover``)."""
