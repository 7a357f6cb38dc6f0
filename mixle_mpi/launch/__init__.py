"""Starting a job and ending it whole: the launcher behind ``mixle-mpi run`` (``launcher``),
the reaper that ends the job's processes if the launcher dies (``reaper``, its own process),
the checks that end a stuck or lost launch (``jobchecks``), which processes are ranks
(``ranks``), the files and variables the launcher and the ranks share (``contract``) and the
MPICH rank wrapper (``rankwrapper``, ``rankwrap.sh``); and for a launch over several hosts
that lost one: its hosts (``hostlist``), a probe of each (``hostprobe``), which to leave out
(``host_plan``) and the relaunch without them (``hostrelaunch``). Imports only ``core``: the ranks
(``runtime``) import its contract, never the other way round."""
