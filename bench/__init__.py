"""The benchmarks: each script is a module run from the repository root, ``python -m bench.<kind>.<name>``,
and writes its results under ``bench/results/`` (``bench.common.RESULTS``).

- ``bench.costs``: what things cost on this machine — environment and LLM throughput, world-model
  training time, the wall time of ``make demo``, of ``adwm evaluate`` on the shipped logs, of the
  README's Python-API example and of the seed cells in smoke mode (on CPU and on a GPU), and
  ``evaluate-policy`` against live evaluation (``performance``).
- ``bench.tables``: the result tables — the paper's main table on the local cells
  (``main_results``), the held-out measuring stick with the test cells' admission and ``--set``
  variants (``heldout``), the ADWM estimator on the default local cell (``adwm_estimates``) and
  the calibration of the local cells' tiny policy families (``local_families``).
- ``bench.studies``: one-off studies that read or recompute a cell's finished stages to answer one
  question — world-model fidelity, action sensitivity, where the error sits (``source_errors``),
  FQE's fit length, interval candidates, calibration by live episodes, the rollout budget and
  imagined episodes printed beside real ones.
- ``bench.common``: what they share — paths (``REPO``, ``RESULTS``), the machine's description, the
  default local environment and its tiny family, development / admitted test cells, and the one
  way to reach a cell's finished stage artifact, :func:`bench.common.artifact` (through
  ``adwm_core.pipeline``).

No bench module imports another bench script; what two of them share lives in ``bench.common``.
"""
