"""The version and the distribution's name: one home, read by pyproject, the CLI and the cache,
imported without the package's lazy API."""

__version__ = "0.1.0"
DISTRIBUTION = "gemm-autotune"  # the name pip installs it by (pyproject's project.name)
# Unrelated projects on the package index that ship a command `autotune` or a package
# `autotune_cli` too: installed beside this one, either may shadow the other.
NAMESAKES = ("autotune", "autotune-cli")


def namesakes_installed() -> list[str]:
    """"NAME VERSION" of each NAMESAKES distribution installed in this environment."""
    from importlib import metadata

    found = []
    for name in NAMESAKES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return found
