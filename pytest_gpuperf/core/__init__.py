"""The core: options, units and files (stdlib only: no numpy, torch or pytest)."""
