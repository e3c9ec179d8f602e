"""Refits over resampled logs: ADWM's default re-fitted on bootstrap draws of the log's
episodes (the interval ``refits``, ope/statistics/bounds.py; the classical reference among
issue 58's candidates).

Refit b draws the log's N episodes with replacement from a generator seeded by b alone, so
every agent and ε level of a cell reads the same draws. On the draw it rebuilds everything the
default fits on the log: the state bank (starts, logged successors, carry-over signatures) and
the hand-over's Q̂ at every ε. It reads through world-model member b mod K, which is not
refitted (one training costs minutes; under the default the denoiser answers no step, the
encoder's latents are all imagination reads). It imagines one run of M rollouts per ε with
seed b, and its estimate Ĵ_b is their mean return. The spread of Ĵ_b over b carries the log's
sampling error through the bank, Q̂ and the rollouts; it does not carry what no resample of
the log can show (the error off the log, held_out.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ...data.behaviour_log import BehaviourLog
from ...model.world_model import WorldModel
from ..answers import REWARD_SUM
from ..classical.logged_steps import fit_fqe
from ..classical.settings import BaselineConfig
from ..settings import AdwmConfig
from .diffusion_transition import adwm_transition
from .encoded_log import EncodedLog
from .rollouts import ImaginedRollouts
from .transitions import Policy


@dataclass(frozen=True)
class Refits:
    """Ĵ_b of every refit b at each ε level."""

    epsilons: tuple[float, ...]
    values: np.ndarray  # (B, len(epsilons))

    def at(self, epsilon: float) -> np.ndarray:
        """(B,) Ĵ_b at ``epsilon``."""
        return self.values[:, self.epsilons.index(float(epsilon))]

    def to_json(self) -> dict:
        """The refits' Ĵ_b by ε, each key the ε's exact repr (read back with float())."""
        return {"refits": len(self.values), "by_epsilon": {repr(e): self.at(e).tolist() for e in self.epsilons}}


def refit_values(members: Sequence[WorldModel], log: BehaviourLog, scores: pa.Table, policy: Policy, *,
                 scores_name: str, epsilons: Sequence[float], config: AdwmConfig, settings: BaselineConfig,
                 refits: int, progress: Callable[[int, int], None] | None = None) -> Refits:
    """Ĵ_b of ``refits`` refits of the default over resampled episodes of ``log`` (module
    docstring); ``scores``: π_e's greedy actions at the logged steps (the hand-over's, a log-prob
    or greedy-action table); ``progress(done, total)`` after each refit."""
    if not config.hands_over_to_fqe:
        raise ValueError(f"off_log={config.off_log!r}: the refits re-fit the hand-over's Q̂; choose an off_log that "
                         "hands over to FQE, or another interval")
    episodes = log.steps["episode"].to_numpy()
    ids = episodes[log.bounds[:-1]]
    log_rows, score_rows = _rows_by_episode(episodes), _rows_by_episode(scores["episode"].to_numpy())
    values = np.empty((refits, len(epsilons)))
    for b in range(refits):
        drawn = ids[np.random.default_rng(b).integers(0, len(ids), len(ids))]
        model = members[b % len(members)]
        encoded = EncodedLog(BehaviourLog(_redrawn(log.steps, log_rows, drawn), f"refit {b} of the log"), model)
        steps = encoded.steps(_redrawn(scores, score_rows, drawn), scores_name=scores_name,
                              action_reading=settings.fqe.action_reading)
        q = {epsilon: fit_fqe(steps, model, epsilon, settings, seed=0) for epsilon in epsilons}
        run = ImaginedRollouts(encoded.bank, config, noise_levels=model.diffusion.n_steps).run(
            policy, adwm_transition(model, encoded.bank, config, q), epsilons, seed=b)
        values[b] = [run.values(REWARD_SUM, epsilon).mean() for epsilon in epsilons]
        if progress is not None:
            progress(b + 1, refits)
    return Refits(tuple(float(e) for e in epsilons), values)


def _rows_by_episode(episodes: np.ndarray) -> dict[int, np.ndarray]:
    """Row numbers of each episode id, in table order."""
    order = np.argsort(episodes, kind="stable")
    ids, firsts = np.unique(episodes[order], return_index=True)
    return dict(zip(ids.tolist(), np.split(order, firsts[1:])))


def _redrawn(table: pa.Table, rows: dict[int, np.ndarray], drawn: np.ndarray) -> pa.Table:
    """The rows of the episodes ``drawn`` (ids, repeats allowed), the j-th draw renumbered episode j."""
    taken = [rows.get(int(i), np.empty(0, np.int64)) for i in drawn]
    found = table.take(pa.array(np.concatenate(taken)))
    renumbered = pa.array(np.repeat(np.arange(len(drawn)), [len(r) for r in taken]), table.schema.field("episode").type)
    return found.set_column(table.schema.get_field_index("episode"), "episode", renumbered)
