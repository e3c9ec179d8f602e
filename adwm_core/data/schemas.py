"""The Parquet data contracts (docs/operations.md, "Data contracts"), declared once.

Every stage writes and reads through :mod:`adwm_core.data.io`, which validates
against these contracts: a missing column, a wrong type, a null in a required
column or a value outside a column's allowed set is an error naming the
column and the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass(frozen=True)
class Contract:
    """A named Arrow schema; non-nullable fields are required to hold no nulls. ``optional``
    columns may be absent from a table (they are read as all null)."""

    name: str
    schema: pa.Schema
    allowed: dict[str, frozenset[str]] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()

    @property
    def columns(self) -> list[str]:
        return self.schema.names


def _f(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


SOURCES = frozenset({"behavior", "ground_truth"})
POLICY_ROLES = frozenset({"behavior", "eval"})

TRAJECTORIES = Contract(
    "trajectories",
    pa.schema(
        [
            _f("cell", pa.string()),
            _f("source", pa.string()),  # behavior | ground_truth
            _f("policy", pa.string()),  # policy label, e.g. "smollm2-sft@p0"
            _f("epsilon", pa.float64(), nullable=True),  # null for behaviour data
            _f("seed", pa.int64()),
            _f("episode", pa.int64()),  # unique within a file
            _f("task", pa.string()),  # environment task type
            _f("variation", pa.int64()),  # engine instance id of the task
            _f("t", pa.int64()),
            _f("task_description", pa.string()),
            _f("observation", pa.string()),  # text the agent saw before acting at t
            _f("next_observation", pa.string()),  # text the environment answered the action with
            _f("response", pa.string()),  # raw LLM text (the action itself for scripted agents)
            _f("action", pa.string()),
            _f("action_valid", pa.bool_()),
            _f("admissible", pa.list_(pa.string()), nullable=True),  # null where not listed
            _f("reward", pa.float64()),
            _f("done", pa.bool_()),  # the environment ended the episode (not a horizon cut)
            _f("score", pa.float64()),  # cumulative normalised score after the step
            _f("success", pa.bool_()),  # the engine's win flag after the step
            # log π_b(a_t|h_t) as the logging system recorded it (imported logs); null where unknown
            _f("behavior_logprob", pa.float64(), nullable=True),
        ]
    ),
    allowed={"source": SOURCES},
    optional=frozenset({"behavior_logprob"}),
)

LOGPROBS = Contract(
    "logprobs",
    pa.schema(
        [
            _f("episode", pa.int64()),
            _f("t", pa.int64()),
            _f("policy", pa.string()),  # behavior | eval
            _f("epsilon", pa.float64(), nullable=True),  # null for the behaviour policy
            _f("logprob", pa.float64()),  # log pi(a_t | h_t) of the whole action span
            _f("n_tokens", pa.int64()),
            _f("n_admissible", pa.int64()),
            # π_e's own (greedy, ε = 0) action at h_t, for FQE's V(s); null on behaviour rows
            _f("greedy_action", pa.string(), nullable=True),
        ]
    ),
    allowed={"policy": POLICY_ROLES},
)

ESTIMATES = Contract(
    "estimates",
    pa.schema(
        [
            _f("cell", pa.string()),
            _f("estimator", pa.string()),
            _f("policy", pa.string()),
            _f("epsilon", pa.float64()),
            _f("seed", pa.int64()),
            _f("value", pa.float64()),  # saturated at ±float max; rank by (sign, log_abs_value)
            _f("ci_low", pa.float64()),
            _f("ci_high", pa.float64()),
            _f("log_abs_value", pa.float64()),  # log|Ĵ| exactly, −inf for 0
            _f("sign", pa.int64()),  # −1, 0 or 1
            # trust diagnostics (ope/statistics/diagnostics.py), null where they do not apply:
            _f("log_share", pa.float64(), nullable=True),  # world models: imagined steps answered by the log
            _f("off_log_distance", pa.float64(), nullable=True),  # world models: how far the others are from it
            _f("ess", pa.float64(), nullable=True),  # importance weighting: effective sample size
            _f("top_weight_share", pa.float64(), nullable=True),  # importance weighting: the top trajectory's share
        ]
    ),
    optional=frozenset({"log_share", "off_log_distance", "ess", "top_weight_share"}),
)

GROUND_TRUTH = Contract(
    "ground_truth",
    pa.schema(
        [
            _f("cell", pa.string()),
            _f("policy", pa.string()),
            _f("epsilon", pa.float64()),
            _f("n_episodes", pa.int64()),
            _f("mean_return", pa.float64()),
            _f("success_rate", pa.float64()),
            _f("stderr", pa.float64()),  # standard error of mean_return
            _f("success_stderr", pa.float64()),  # standard error of success_rate
        ]
    ),
)

# ADWM's imagined rollouts, one row each (the ADWM stage's ``rollouts``): what the verdicts and
# the identified bounds read (ope/statistics/bounds.py). A unit is a rollout index of one seed: the
# same start and draws for every ε level and every agent scored with that seed.
ROLLOUTS = Contract(
    "rollouts",
    pa.schema(
        [
            _f("estimator", pa.string()),
            _f("policy", pa.string()),
            _f("epsilon", pa.float64()),
            _f("member", pa.int64()),  # world-model member
            _f("seed", pa.int64()),
            _f("unit", pa.int64()),
            _f("value", pa.float64()),  # the imagined return Σ_t γ^t r̂_t
            _f("low", pa.float64()),  # its identified bounds L, U
            _f("high", pa.float64()),
            _f("steps", pa.int64()),  # imagined steps
            _f("log_steps", pa.int64()),  # of which the log answered, before the first it did not
            _f("known", pa.float64()),  # the return of those steps, G_i (the value where it never left the log)
        ]
    ),
)

CONTRACTS = {c.name: c for c in (TRAJECTORIES, LOGPROBS, ESTIMATES, GROUND_TRUTH, ROLLOUTS)}
