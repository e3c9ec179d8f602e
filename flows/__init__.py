"""Prefect flows: ope_cell (the per-cell DAG), evaluate_policy, full_suite (nightly)."""
