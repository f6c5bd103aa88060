"""Project-wide test configuration."""

# pytester drives inner pytest runs in the harness suites; pytest only accepts
# pytest_plugins in the top-level conftest.
pytest_plugins = ["pytester"]
