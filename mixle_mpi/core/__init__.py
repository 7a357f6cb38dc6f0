"""Base layer: errors, shared checks, exit codes, bounded blocking calls, safe file writes,
logging, BLAS pinning and the per-shard E-step. Imports nothing else of mixle_mpi."""
