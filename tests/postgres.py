"""A PostgreSQL server for the tests: the soak's throwaway server (:mod:`recdiff.tools.soak.postgres`), started as an
unprivileged user on loopback in a temp dir; stopped and started again by the tests of a restarted database (as shell
commands a sweep's fault can run too)."""

from recdiff.tools.soak.postgres import Postgres, free_port, server_binaries

__all__ = ["Postgres", "free_port", "server_binaries"]
