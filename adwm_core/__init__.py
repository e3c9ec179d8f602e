"""ADWM: off-policy evaluation of LLM agents with a latent diffusion world model.

The library is importable and testable without Prefect or MLflow; the
orchestration glue lives in the top-level ``tasks`` and ``flows`` packages.
"""

__version__ = "0.1.0"
