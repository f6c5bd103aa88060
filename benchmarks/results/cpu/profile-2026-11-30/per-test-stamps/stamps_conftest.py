import stamps


def pytest_configure(config):
    stamps.controller_install()


def pytest_sessionfinish(session):
    stamps.dump()
