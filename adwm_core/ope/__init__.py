"""Off-policy estimators: ADWM imagined rollouts, COBS baselines, ranking metrics, world-model fidelity instruments."""
