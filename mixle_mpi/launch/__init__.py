"""Starting a job and ending it whole: the launcher behind ``mixle-mpi run`` (``launcher``),
the reaper that ends the job's processes if the launcher dies (``reaper``, its own process),
the checks that end a stuck or lost launch (``jobchecks``), which processes are ranks
(``ranks``), the files and variables the launcher and the ranks share (``contract``) and the
MPICH rank wrapper (``rankwrapper``, ``rankwrap.sh``). Imports only ``core``: the ranks
(``runtime``) import its contract, never the other way round."""
