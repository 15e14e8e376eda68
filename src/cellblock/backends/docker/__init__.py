"""Docker (runc) and gVisor (runsc) backends: ``Sandbox("docker")``, ``Sandbox("gvisor")``.

Importing this package imports the Docker SDK; :mod:`cellblock.backends` imports it only
when one of these backends is first used.
"""

from cellblock.backends.docker.backend import DockerBackend, GVisorBackend
from cellblock.backends.docker.options import DockerOptions

__all__ = ["DockerBackend", "DockerOptions", "GVisorBackend"]
