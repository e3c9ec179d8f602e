"""Prefect tasks, one module per stage of a cell; thin glue: config slice in, artifact URI out.

The only layer that touches both adwm_core and Prefect/MLflow.
"""
