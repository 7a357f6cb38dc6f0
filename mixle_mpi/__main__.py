import sys

from mixle_mpi.cli import main

sys.exit(main())
