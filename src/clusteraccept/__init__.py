"""clusteraccept: acceptance suite for Slurm GPU clusters."""

__version__ = "0.1.0"
