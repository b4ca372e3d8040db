"""Statistics of a run's results: the unbiased pass@k estimator (`passk`) and bootstrap intervals over
problems (`intervals`). Nothing here imports numpy at package import: `quench.stats.passk` stays light."""
