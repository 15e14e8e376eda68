"""Helpers shared by every ``cellblock`` sub-command."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from rich.console import Console

from cellblock.errors import CellblockError

console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


def friendly_errors(func: F) -> F:
    """Turn cellblock and validation errors into a message and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from pydantic import ValidationError

        try:
            return func(*args, **kwargs)
        except CellblockError as exc:
            console.print(f"[bold red]error:[/] {exc.safe_message}")
            if exc.hint:
                console.print(f"[yellow]fix:[/] {exc.hint}")
            if exc.detail:
                console.print(f"[dim]detail: {exc.detail}[/]")
            sys.exit(2)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "value"
                console.print(f"[bold red]error:[/] {loc}: {err['msg']}")
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
