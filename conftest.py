# Root conftest: the plugin's own tests drive inner pytest sessions through `pytester`.
pytest_plugins = ["pytester"]
