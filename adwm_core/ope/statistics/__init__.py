"""What every estimator reports the same way: intervals, ranking metrics, trust diagnostics,
numbers kept in signed log form, and the prediction-powered calibration by live episodes."""
