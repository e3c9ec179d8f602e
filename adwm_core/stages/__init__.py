"""The stages of a cell as path-level functions (files in, files out; outputs checked before any
work starts): behaviour collection, ground truth and log-prob extraction (collection.py), the
ψ adapter, ADWM and the baselines. The algorithms they call take arrays, tables and models."""
