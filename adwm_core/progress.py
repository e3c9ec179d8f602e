"""Progress bars on the terminal (stderr) for the long stages of a run in this process: the
Python API and ``adwm evaluate`` without a Prefect server; the tracked flows add a Prefect
progress artifact beside the same bar (tasks/common.py)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

from tqdm import tqdm

from .pipeline import Tracker


@contextlib.contextmanager
def progress_bar(label: str) -> Iterator[Callable[..., dict[str, str]]]:
    """``update(done, total, **counts)`` of a bar labelled ``label``: each count (``imagined_steps``:
    a running total) shown as a rate per second since the bar opened; returns those rates."""
    bar = tqdm(desc=label, file=sys.stderr, leave=False, dynamic_ncols=True)
    started = time.perf_counter()

    def update(done: int, total: int, **counts: int) -> dict[str, str]:
        elapsed = max(time.perf_counter() - started, 1e-9)
        rates = {name.replace("_", " "): f"{count / elapsed:.1f}/s" for name, count in counts.items()}
        bar.total, bar.n = total, done
        bar.set_postfix(rates, refresh=False)
        bar.refresh()
        return rates

    try:
        yield update
    finally:
        bar.close()


class TerminalTracker(Tracker):
    """A stage's long loops as progress bars on the terminal, labelled with the cell's name."""

    def __init__(self, cell: str) -> None:
        self.cell = cell

    def progress(self, what: str):
        return progress_bar(f"{self.cell}: {what}")
