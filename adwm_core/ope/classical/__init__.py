"""The classical off-policy estimators (COBS, Voloshin et al. 2019; app:baselines): the
estimators (``estimators.py``), fitted Q evaluation (``fqe.py``), what they read from the log
(``logged_steps.py``) and the loop that runs every configured one (``meta.py``)."""
