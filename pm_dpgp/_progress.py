"""Progress bars for long loops, in the style PyMC users know (``rich``).

PyMC draws its sampling progress with ``rich`` (a PyMC dependency); this module
uses ``rich.progress`` directly with the same look (bar, completed/total,
elapsed and remaining time) plus a free-text field for the privacy spent.
``progressbar=False`` gives a no-op bar, so loops need no branching.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ProgressBar", "progress_bar"]


class ProgressBar:
    """Thin handle on one ``rich`` task; all methods are no-ops when disabled."""

    def __init__(self, progress: Any | None, task: Any | None) -> None:
        self._progress = progress
        self._task = task

    def advance(self, status: str = "") -> None:
        """Mark one step done and show ``status`` (e.g. the cumulative ε)."""
        if self._progress is not None:
            self._progress.update(self._task, advance=1, status=status)

    def update(self, status: str) -> None:
        """Show ``status`` without advancing."""
        if self._progress is not None:
            self._progress.update(self._task, status=status)


@contextmanager
def progress_bar(total: int, description: str, *, enabled: bool = True) -> Iterator[ProgressBar]:
    """Context manager yielding a ``ProgressBar`` over ``total`` steps.

    The bar is closed on exit, also when the loop is left by ``KeyboardInterrupt``,
    so an interrupted loop leaves the terminal clean and can return what it has.
    """
    if not enabled:
        yield ProgressBar(None, None)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    try:  # PyMC's colour theme, when this PyMC version exposes it
        from pymc.progress_bar import default_progress_theme as theme
    except ImportError:  # pragma: no cover - older or newer PyMC
        theme = None
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("<"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
    )
    kwargs: dict[str, Any] = {}
    if theme is not None:
        from rich.console import Console

        kwargs["console"] = Console(theme=theme)
    with Progress(*columns, **kwargs) as progress:
        task = progress.add_task(description, total=total, status="")
        yield ProgressBar(progress, task)
