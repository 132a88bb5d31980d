"""The store's tests use the throwaway PostgreSQL cluster's fixtures (tests/postgresql.py)."""

from tests.postgresql import pg_cluster, pg_store  # noqa: F401 - fixtures
