"""`python -m gpu_cluster` is the `gpu-cluster` command."""

import sys

from gpu_cluster.cli import main

sys.exit(main())
