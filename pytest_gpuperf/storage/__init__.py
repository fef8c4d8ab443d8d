"""Storage: baseline files, their JSON Schema, and the JSON codec of results."""
