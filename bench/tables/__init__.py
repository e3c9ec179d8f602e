"""Result tables: estimators graded against ground truth on the cells (``python -m bench.tables.<name>``)."""
