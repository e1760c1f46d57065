"""Returns its payload as the result."""

from boxcar_guest import WitWorld, handler  # noqa: F401 - componentize-py looks up WitWorld here


@handler
def handle(job):
    return job.payload
