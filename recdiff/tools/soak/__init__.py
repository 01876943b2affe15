"""The soak: a real sweep of N local workers on one storage under a seeded, time-bounded fault schedule (kills,
pauses longer than the grace period, database restarts, one interrupt of the whole sweep and the same command again),
then a verdict per configuration: COMPLETE exactly once, or what is missing and why (docs/sweeps.md, "Soak").

- :mod:`~recdiff.tools.soak.schedule`: the seeded schedule
- :mod:`~recdiff.tools.soak.workers`: the worker processes, runs of one command
- :mod:`~recdiff.tools.soak.chaos`: the faults, landed as they come due
- :mod:`~recdiff.tools.soak.verdict`: the table and the checks
- :mod:`~recdiff.tools.soak.postgres`: a throwaway PostgreSQL server
"""
