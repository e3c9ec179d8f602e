"""Where ADWM's error sits, by what answered: π_e^ε's ground-truth episodes walked through a
transition, teacher forced (bench/studies/source_errors.py runs it on a cell).

Every real step of a ground-truth episode is asked of the cell's ADWM transition as imagination
asks it, and each source's *oracle walk* answers that source's steps with the environment's own
(imagination/walks.py: the walk, Ĵ_tf and the oracle). Per
(π_e, ε) point, then:

- ADWM's Ĵ against mean Ĵ_tf: what imagination's own states and π_e's closed loop cost;
- mean Ĵ_tf against a source's oracle walk: what that source's answers cost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ..answers import SOURCES, VALUE
from ..imagination.walks import WalkedStep, walked_value
from ..statistics.metrics import normalised_absolute_error, spearman


def source_points(steps: Sequence[WalkedStep], gamma: float) -> list[dict]:
    """Per (π_e, ε) point: J (mean G_0), the teacher-forced Ĵ (``walked``), each source's oracle
    walk (``oracle_<source>``), the share of π_e's real steps each source answered
    (``<source>_share``), and per source the mean error of its answers, r̂_t − r_t
    (``<source>_reward_error``; Q̂ − G_t for ``value``, ``value_value_error``)."""
    by_episode: dict[tuple, list[WalkedStep]] = defaultdict(list)
    for step in steps:
        by_episode[(step.policy, step.epsilon, step.episode)].append(step)
    by_point: dict[tuple, list[list[WalkedStep]]] = defaultdict(list)
    for (policy, epsilon, _), episode in by_episode.items():
        by_point[(policy, epsilon)].append(sorted(episode, key=lambda s: s.t))
    points = []
    for (policy, epsilon), episodes in sorted(by_point.items()):
        flat = [s for episode in episodes for s in episode]
        point = {"policy": policy, "epsilon": epsilon, "episodes": len(episodes),
                 "truth": float(np.mean([episode[0].return_to_go for episode in episodes])),
                 "walked": float(np.mean([walked_value(e, gamma) for e in episodes]))}
        for source in SOURCES:
            answered = [s for s in flat if s.source == source]
            point[f"{source}_share"] = len(answered) / len(flat)
            point[f"oracle_{source}"] = float(np.mean([walked_value(e, gamma, oracle=frozenset({source}))
                                                        for e in episodes]))
            if source == VALUE:
                point[f"{source}_value_error"] = _mean([s.reward - s.return_to_go for s in answered])
            else:
                point[f"{source}_reward_error"] = _mean([s.reward - s.true_reward for s in answered])
        points.append(point)
    return points


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def source_summary(points: Sequence[dict], estimates: dict[tuple[str, float], float] | None = None) -> dict:
    """Over a cell's points: Spearman ρ and NMAE (against J) of the teacher-forced walk, of each
    source's oracle walk and — ``estimates``, (π_e, ε) → Ĵ — of ADWM's own; each source's share of
    π_e's real steps and the mean error of its answers."""
    truth = [p["truth"] for p in points]
    rows = {"walked": [p["walked"] for p in points],
            **{f"oracle_{source}": [p[f"oracle_{source}"] for p in points] for source in SOURCES}}
    if estimates is not None:
        rows = {"imagined": [estimates[(p["policy"], p["epsilon"])] for p in points], **rows}
    spread = np.ptp(truth) > 0
    summary = {name: {"rho": spearman(values, truth),
                      "nmae": normalised_absolute_error(values, truth) if spread else float("nan")}
               for name, values in rows.items()}
    for source in SOURCES:
        summary[f"{source}_share"] = float(np.mean([p[f"{source}_share"] for p in points]))
        for kind in ("reward_error", "value_error"):
            errors = [p[f"{source}_{kind}"] for p in points if f"{source}_{kind}" in p]
            if errors:
                summary[f"{source}_{kind}"] = _mean([e for e in errors if np.isfinite(e)])
    return summary
