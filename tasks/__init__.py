"""The glue between adwm_core and Prefect/MLflow: one generic task per stage of the registry
(stages.py), the checks before any stage (policies.py), the report's Prefect artifacts and
closing screen (report.py), MLflow runs (common.py).

The only layer that touches both adwm_core and Prefect/MLflow.
"""
