# Sourced by the job scripts: find mixle-mpi and make the example data if it is missing.
# Every setting is an environment variable with a default, so a job runs as it is.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -z "${MIXLE_MPI:-}" ]; then
  if command -v mixle-mpi >/dev/null; then MIXLE_MPI=mixle-mpi
  else MIXLE_MPI="$HERE/../.venv/bin/mixle-mpi"; fi
fi
PYTHON=${PYTHON:-$(dirname "$(command -v "$MIXLE_MPI")")/python}
RANKS=${RANKS:-4}                      # 1 driver + RANKS-1 workers
WORK=${WORK:-$PWD/mixle_mpi_jobs}      # outputs go under here
mkdir -p "$WORK"

example_data() {  # example_data FILE N: write the example data set unless it exists
  [ -f "$1" ] || "$PYTHON" "$HERE/make_example_data.py" "$1" "$2"
}
