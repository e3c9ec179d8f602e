"""Verdicts on pairs of points, made and worded in one place.

A verdict on a pair (a, b) reads an interval [low, high] on the difference d = Ĵ_a − Ĵ_b: "a
better" where low > 0, "b better" where high < 0, and otherwise "cannot tell", with, where a
reading can say it, about how many live episodes per point would likely decide it.

Every method the product has builds its verdicts here, so a pair reads the same way wherever it
is printed, and the one verdict the product stands behind is told apart from the instruments:

- **the product's verdict**: the recommended estimate's band d ± t u(a, b), calibrated on the
  bench's signs (recommend.py), with live episodes folded in where there are some;
- **instruments**, printed below it and labelled: ADWM's paired interval over common random
  numbers and the log alone's identified bounds (bounds.py, ranking.py), two intervals read apart
  (``unpaired``), and ADWM topped up by live episodes (calibration.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

CANNOT_TELL = "cannot tell from these logs"
MOST_LIVE = 10_000  # past this many live episodes per point, "cannot tell" says so rather than a count
COLUMNS = ("a", "b", "difference", "lower", "upper", "better", "live_episodes")  # a verdict as a table's row


@dataclass(frozen=True)
class Verdict:
    """Candidate ``a`` against ``b``: d = Ĵ_a − Ĵ_b, the interval [low, high] on it and, where it
    cannot tell, the live episodes per point that would likely decide it (None: not reckoned);
    ``prior_half_width``: the calibrated error of d that live episodes are weighed against
    (recommend.with_live; inf: none)."""

    a: str
    b: str
    difference: float
    low: float
    high: float
    live_episodes: int | None = None
    prior_half_width: float = math.inf

    @property
    def better(self) -> str | None:
        """The better candidate: ``a`` where low > 0, ``b`` where high < 0; None: cannot tell."""
        return self.a if self.low > 0 else self.b if self.high < 0 else None

    def line(self, undecided: str = CANNOT_TELL) -> str:
        """The verdict in words; ``undecided`` what it says where the interval holds 0."""
        said = f"{self.better} better" if self.better else undecided + self._to_decide()
        return (f"{self.a} vs {self.b}: Ĵ difference {self.difference:+.4g} [{self.low:+.4g}, {self.high:+.4g}] "
                f"→ {said}")

    def _to_decide(self) -> str:
        if self.live_episodes is None:
            return ""
        if self.live_episodes > MOST_LIVE:
            return f"; more than {MOST_LIVE:,} live episodes per point would be needed"
        return f"; about {self.live_episodes} live episodes per point would likely decide it"

    def row(self) -> dict:
        """The verdict as a table's row (``COLUMNS``)."""
        return {"a": self.a, "b": self.b, "difference": self.difference, "lower": self.low, "upper": self.high,
                "better": self.better, "live_episodes": self.live_episodes}


def unpaired(intervals: Mapping[str, tuple[float, float, float]]) -> list[Verdict]:
    """A verdict on every pair of ``intervals`` (name → (value, low, high)) read as two independent
    intervals: the difference's interval [low_a − high_b, high_a − low_b], so a pair is decided
    only where the two intervals do not overlap (estimators with no paired reading)."""
    return [Verdict(a, b, intervals[a][0] - intervals[b][0], intervals[a][1] - intervals[b][2],
                    intervals[a][2] - intervals[b][1]) for a, b in combinations(intervals, 2)]


def winner(candidates: Iterable[str], verdicts: Sequence[Verdict]) -> str | None:
    """The candidate whose verdict beats every other candidate; None where the verdicts name none."""
    names = list(candidates)
    for name in names:
        beaten = {v.b if v.a == name else v.a for v in verdicts if v.better == name}
        if beaten >= set(names) - {name}:
            return name
    return None
