"""Project-wide test configuration."""

# pytester drives inner pytest runs in the harness suites; pytest only accepts
# pytest_plugins in the top-level conftest. tests/leftovers.py fails a run that leaves
# rankgate-* folders in its (private) temp dir.
pytest_plugins = ["pytester", "tests.leftovers"]
