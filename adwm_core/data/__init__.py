"""Data contracts and their Parquet IO."""

from .io import SchemaError, behaviour_rows, check_output, read_table, table_from_rows, validate, write_table
from .schemas import CONTRACTS, ESTIMATES, GROUND_TRUTH, LOGPROBS, ROLLOUTS, TRAJECTORIES, Contract

__all__ = [
    "CONTRACTS",
    "ESTIMATES",
    "GROUND_TRUTH",
    "LOGPROBS",
    "ROLLOUTS",
    "TRAJECTORIES",
    "Contract",
    "SchemaError",
    "behaviour_rows",
    "check_output",
    "read_table",
    "table_from_rows",
    "validate",
    "write_table",
]
