"""Research instruments read by the benches and the CLI, not by any estimate: world-model
fidelity (``fidelity.py``) and where ADWM's error sits by what answered (``source_errors.py``)."""
