"""A real Slurm on this machine, run from the configuration components/slurm generates.

`venv/bin/python -m tests.slurm_local` (make slurm-check): see __main__.py.
"""
