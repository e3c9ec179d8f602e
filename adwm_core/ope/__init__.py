"""Off-policy estimators, by concept: ``imagination/`` (ADWM's imagined rollouts and the
transitions that answer them), ``classical/`` (the COBS estimators and FQE), ``statistics/``
(intervals, metrics, diagnostics, calibration), ``instruments/`` (fidelity and error-location
instruments for the benches); ``settings.py`` holds ADWM's inference settings.

The public names load on first use (PEP 562), so importing a light module of this package
(``adwm_core.ope.settings``, ``adwm_core.ope.classical.settings``) does not load torch::

    from adwm_core.ope import WIS, LoggedTrajectories, AdwmConfig, adwm_estimates, spearman
"""

from importlib import import_module

_EXPORTS = {
    "imagination.diffusion_transition": ("DiffusionTransition", "adwm_transition", "reference_transition"),
    "imagination.rollouts": ("ImaginedRollouts", "Rollouts"),
    "imagination.transitions": ("Transition", "LoggedSuccessors", "NearestLogged"),
    "settings": ("AdwmConfig",),
    "classical.settings": ("BaselineConfig", "FQEConfig"),
    "classical.estimators": ("ESTIMATORS", "Estimate", "LoggedTrajectories", "OffPolicyEstimator", "DirectMethod", "FittedQ",
                   "ImportanceSampling", "PerDecisionImportanceSampling", "WeightedImportanceSampling",
                   "WeightedPerDecisionImportanceSampling", "DoublyRobust", "WeightedDoublyRobust"),
    "imagination.estimates": ("adwm_estimates",),
    "statistics.metrics": ("spearman", "kendall", "regret_at_1", "normalised_absolute_error"),
    "imagination.state_bank": ("StateBank",),
}
_SHORT = {"DM": "DirectMethod", "FQE": "FittedQ", "IS": "ImportanceSampling", "PDIS": "PerDecisionImportanceSampling",
          "WIS": "WeightedImportanceSampling", "WPDIS": "WeightedPerDecisionImportanceSampling",
          "DR": "DoublyRobust", "WDR": "WeightedDoublyRobust"}  # the estimators by the names their rows carry
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted([*_MODULE_OF, *_SHORT])


def __getattr__(name: str):
    full = _SHORT.get(name, name)
    if full not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_MODULE_OF[full]}", __name__), full)


def __dir__() -> list[str]:
    return __all__
