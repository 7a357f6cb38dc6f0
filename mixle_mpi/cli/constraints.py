"""The pins of the versions the fitted bits depend on (``mixle_mpi/constraints.txt``, shipped
in the package): ``python -m mixle_mpi.cli.constraints`` prints the file's path, for
``pip install ... -c "$(python -m mixle_mpi.cli.constraints)"``."""

from __future__ import annotations

import sys
from importlib import resources


def path() -> str:
    return str(resources.files("mixle_mpi").joinpath("constraints.txt"))


def pins() -> dict[str, str]:
    """{distribution: version} of the file (pure but for reading it)."""
    out = {}
    with open(path(), encoding="utf-8") as fh:
        for line in fh:
            name, eq, version = line.split("#")[0].strip().partition("==")
            if eq:
                out[name] = version
    return out


if __name__ == "__main__":
    sys.stdout.write(path() + "\n")
