"""Two closed vocabularies every reader of ADWM's output shares: what answered an imagined step,
and the names of the estimator rows.

What answered (``ImaginedStep.source``, ``Outcome.source``, the ``<source>_share`` timings):

- ``log``: the behaviour log holds this very (state, action) pair: one of its logged successors;
- ``carried``: a logged outcome of another pair, carried over by what the action does to the
  episode's own text (imagination/carry_over.py);
- ``value``: the rollout handed to FQE's Q̂ (imagination/value_handover.py): r̂ is Q̂(s_t, a_t),
  the return of the rest of the episode, and the episode ends there;
- ``diffusion``: the world model's guided reverse process and its heads
  (imagination/diffusion_transition.py);
- ``nearest``: the logged transition of the most similar (state, action), kNN-WM's answer
  (imagination/transitions.py, ``NearestLogged``).

Estimator rows are named ``<estimator>:<value estimate>`` (:func:`row_name`), ADWM's and kNN-WM's
as every classical estimator's.
"""

from __future__ import annotations

LOG, CARRIED, VALUE, DIFFUSION, NEAREST = "log", "carried", "value", "diffusion", "nearest"
SOURCES = (LOG, CARRIED, VALUE, DIFFUSION, NEAREST)

ADWM, KNN_WM = "ADWM", "kNN-WM"  # the imagined estimators: the default's transition chain, the reference
REWARD_SUM = "reward_sum"  # Ĵ as the imagined rewards' discounted sum (settings.VALUE_ESTIMATES)


def row_name(estimator: str, value_estimate: str = REWARD_SUM) -> str:
    """The estimates row of ``estimator`` under ``value_estimate``: ``ADWM:reward_sum``."""
    return f"{estimator}:{value_estimate}"


RANKED_BY = row_name(ADWM)  # the row agents are ranked and selected by
