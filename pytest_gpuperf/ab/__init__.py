"""Same-machine A/B runs: the git worktree of REF, the worker processes, their coordinator, and the A/B results."""
