"""The greedy-action stage: π_e's own action at every logged step and nothing scored — all that
FQE's target policy reads, V(s) = Σ_a π_e^ε(a|s) Q(s, a) with π_e^ε = (1 − ε)·greedy + ε·uniform.
ADWM's hand-over reads it where no importance weight is formed (``adwm.handover_actions:
greedy``, as evaluate-policy scores a new agent), instead of the log-prob stage, which also scores
π_e's log-prob of every logged action."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..data import LOGPROBS, TRAJECTORIES, check_output, read_table, write_table
from ..policies.loading import ModelCache
from ..specs import PolicySpec, check_epsilons
from .collection import logged_histories, logprob_table

if TYPE_CHECKING:
    from ..pipeline import StageRun


def greedy_actions(trajectories: str, env_name: str, policy: PolicySpec, out: str, *,
                   epsilons: Sequence[float], overwrite: bool = False) -> pa.Table:
    """A log-prob table (data/schemas.py: LOGPROBS) of π_e's rows alone: per logged step and ε its
    greedy action, the size of the logged admissible list, and no log-prob (NaN, 0 tokens)."""
    check_output(out, overwrite=overwrite)
    check_epsilons(epsilons)
    steps = list(logged_histories(read_table(trajectories, TRAJECTORIES)))
    histories = [history for _, history in steps]
    actions = [decision.action for decision in ModelCache().policy(policy, env_name).act(histories)]
    unscored = (np.full(len(steps), np.nan), np.zeros(len(steps), np.int64))
    n_admissible = np.array([len(h.admissible or ()) for h in histories], np.int64)
    blocks = [("eval", float(eps), *unscored) for eps in epsilons]
    return write_table(logprob_table(steps, blocks, actions, n_admissible), out, LOGPROBS, overwrite=overwrite)


def compute(run: StageRun) -> None:
    cell = run.cell
    greedy_actions(run.input("behaviour", "trajectories"), cell.env.name, run.resolved(run.policy),
                   run.output("actions"), epsilons=cell.evaluation.epsilons)
