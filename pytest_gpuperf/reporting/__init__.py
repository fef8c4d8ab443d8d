"""What users read: the terminal table, Markdown, plots, and the ``gpuperf`` command line."""
