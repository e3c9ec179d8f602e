"""Cost benches: throughput and wall time of each part on this machine (``python -m bench.costs.<name>``)."""
