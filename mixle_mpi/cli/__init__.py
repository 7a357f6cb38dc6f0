"""Everything a person runs: ``mixle-mpi`` and its subcommands (``commands``; ``run`` starts
the launcher of ``mixle_mpi.launch``, ``chaos`` a campaign of ``mixle_mpi.chaos``), demo,
inspect, status, SLURM templates, data input and model specs."""


def main(argv=None):
    """The ``mixle-mpi`` console script (``mixle_mpi.cli:main``); the commands live in
    :mod:`mixle_mpi.cli.commands`, imported only when the script runs."""
    from mixle_mpi.cli.commands import main as run

    return run(argv)
