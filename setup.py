"""Which packages the wheel holds: found, not listed, so that none can be forgotten.

Every folder under autotune_cli/ is a package (with or without __init__.py), and configs/
at the top of the repository is the package autotune_cli.configs. Everything else about
the build is in pyproject.toml; this file exists only because pyproject's own `find` cannot
place a top-level folder inside the package.
"""

from setuptools import find_namespace_packages, setup

PACKAGES = find_namespace_packages(include=["autotune_cli", "autotune_cli.*"],
                                   exclude=["*.__pycache__", "*.__pycache__.*"])

setup(packages=[*PACKAGES, "autotune_cli.configs"],
      package_dir={"autotune_cli.configs": "configs"})
