"""Hostile: spins forever without calling the host."""

from boxcar_guest import WitWorld, handler  # noqa: F401


@handler
def handle(job):
    while True:
        pass
