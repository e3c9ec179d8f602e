"""Imagination: π_e's rollouts answered step by step without the environment — the transitions
(logged successor, carry-over by signature, the value hand-over, the diffusion transition, the
nearest logged transition), the rollout loop, the state bank they read, π_e's memo, and the
scorer that turns rollouts into estimate rows (``estimates.py``; ``driver.py`` runs it on a
stage's files)."""
