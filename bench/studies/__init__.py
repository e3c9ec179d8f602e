"""One-off studies of a question about ADWM on the cells' finished stages (``python -m bench.studies.<name>``)."""
