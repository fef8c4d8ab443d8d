"""Verdicts (pure: numpy and scipy, no torch, no pytest): statistics, the regression decision, counts, bottleneck classes, paired A/B statistics, the one evaluation pipeline, results."""
