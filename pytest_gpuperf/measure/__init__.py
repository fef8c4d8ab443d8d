"""Measuring (torch, lazily): timing backends, probes, peak memory, counting, profiling, telemetry, environment, reference workloads."""
