import sys

from mixle_mpi.cli.commands import main

sys.exit(main())
