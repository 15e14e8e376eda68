"""The central log service (``cellblock serve``): ingestion, detection, dashboard."""

from cellblock.server.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]


def __getattr__(name: str) -> object:
    # FastAPI is an optional extra: importing the package for its settings must not
    # require it; create_app is loaded on first use.
    if name == "create_app":
        from cellblock.server.app import create_app

        return create_app
    raise AttributeError(name)
