"""Package discovery that setuptools' declarative config cannot express.

The ``cli/`` and ``conformance/`` folders install under unambiguous import names
(``conveyor_cli``, ``conveyor_conformance``); see CONTRIBUTING.md.
"""

from setuptools import find_packages, setup

RENAMED = {"conveyor_cli": "cli", "conveyor_conformance": "conformance"}


def _packages() -> list[str]:
    found = find_packages(
        include=["conveyor_sdk", "conveyor_sdk.*", "conveyor_server_min", "conveyor_server_min.*"]
    )
    for name, folder in RENAMED.items():
        found += [name + pkg[len(folder) :] for pkg in find_packages(include=[folder, folder + ".*"])]
    return found


setup(packages=_packages(), package_dir=RENAMED)
