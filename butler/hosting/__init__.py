"""Several agents in one daemon: the agents it hosts under ``/{id}/`` beside its own, and
the admin API that adds and removes them at run time (docs/hosting.md)."""
