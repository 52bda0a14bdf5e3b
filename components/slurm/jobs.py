"""The jobs shipped on every cluster, each one `sbatch` away (installed under Paths.jobs):

  nccl-allreduce.sbatch   nccl-tests all_reduce_perf across all nodes, judged against the
                          shape's published bus bandwidth (catalog/fabric.yaml).
  torchrun-hello.sbatch   a multi-node torchrun hello-world (hello.py: one NCCL all_reduce).
  node-health.sbatch      the boot health check again on every node, draining failures.

Run as `sbatch /opt/gpu-cluster/jobs/<job>`; output goes to SlurmCluster.jobs_output_dir.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.clouds import profile
from components.slurm import shell
from components.slurm.conf import SlurmCluster
from components.slurm.fabric import fabric

HELLO_PORT = 29500


@dataclass(frozen=True)
class JobRuntime:
    """Where a cloud's images keep MPI, nccl-tests and the NCCL network plugin."""

    mpirun: str
    nccl_tests_globs: tuple[str, ...]
    ld_library_path: tuple[str, ...]
    source: str


# The AWS Deep Learning AMI: OpenMPI, EFA, aws-ofi-nccl under /opt/amazon and nccl-tests built per
# CUDA under /usr/local/cuda-*/efa/test-cuda-*/ — the defaults of aws-samples' nccl-tests-ami.sbatch
# (awsome-distributed-training micro-benchmarks/nccl-tests/slurm, 2a5192ac).
AWS_RUNTIME = JobRuntime(
    mpirun="/opt/amazon/openmpi/bin/mpirun",
    nccl_tests_globs=("/usr/local/cuda-*/efa/test-cuda-*/all_reduce_perf",),
    ld_library_path=("/opt/amazon/efa/lib", "/opt/amazon/openmpi/lib", "/opt/amazon/ofi-nccl/lib"),
    source="aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/slurm/nccl-tests-ami.sbatch",
)
# Tencent's images ship neither nccl-tests nor an MPI we know the path of (unconfirmed): the job
# looks on PATH and in /opt/nccl-tests/build (nccl-tests' own `make MPI=1` output directory).
TENCENT_RUNTIME = JobRuntime(
    mpirun="mpirun",
    nccl_tests_globs=("/opt/nccl-tests/build/all_reduce_perf",),
    ld_library_path=(),
    source="unconfirmed: no Tencent image documents MPI or nccl-tests paths",
)
RUNTIMES = {"aws": AWS_RUNTIME, "tencentcloud": TENCENT_RUNTIME}


def _header(name: str, c: SlurmCluster, tasks_per_node: int, gres: bool) -> list[str]:
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={name}",
             f"#SBATCH --nodes={c.nodes}",
             f"#SBATCH --ntasks-per-node={tasks_per_node}",
             "#SBATCH --exclusive",
             f"#SBATCH --output={c.jobs_output_dir}/%x-%j.out"]
    if gres:
        lines.append(f"#SBATCH --gres={c.gres}")
    return lines


def _env_exports(c: SlurmCluster) -> list[str]:
    env = dict(fabric(c.cloud, c.shape.type).nccl_env)
    out = [f"export {shell.assign(k, v)}" for k, v in sorted(env.items())]
    libs = RUNTIMES[c.cloud].ld_library_path
    if libs:
        out.append(f"export {shell.assign('NCCL_EXTRA_LIBS', ':'.join(libs))}")
        out.append('export LD_LIBRARY_PATH="${NCCL_EXTRA_LIBS}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"')
    return out


_NCCL_BODY = r'''
if [ -z "${ALL_REDUCE_BIN:-}" ]; then
  for pattern in "${NCCL_TESTS_GLOBS[@]}"; do
    for candidate in $pattern; do
      [ -x "$candidate" ] && ALL_REDUCE_BIN=$candidate
    done
  done
fi
if [ -z "${ALL_REDUCE_BIN:-}" ] || [ ! -x "$ALL_REDUCE_BIN" ]; then
  echo "nccl-allreduce: no all_reduce_perf found (looked in: ${NCCL_TESTS_GLOBS[*]})." >&2
  echo "Build nccl-tests with MPI=1 (github.com/NVIDIA/nccl-tests) and run: ALL_REDUCE_BIN=/path/all_reduce_perf sbatch $0" >&2
  exit 2
fi
MPIRUN=${MPIRUN:-$DEFAULT_MPIRUN}
mpi_args=(-n "$((GPUS_PER_NODE * SLURM_JOB_NUM_NODES))" -N "$GPUS_PER_NODE" --bind-to none)
if [ "$(id -u)" -eq 0 ]; then mpi_args+=(--allow-run-as-root); fi
for var in "${ENV_VARS[@]}"; do mpi_args+=(-x "$var"); done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "nccl-allreduce: $SLURM_JOB_NUM_NODES x $SHAPE, $ALL_REDUCE_BIN up to $MESSAGE_BYTES bytes"
"$MPIRUN" "${mpi_args[@]}" "$ALL_REDUCE_BIN" -b 8 -e "$MESSAGE_BYTES" -f 2 -g 1 -c 1 -n 20 | tee "$out"
# all_reduce_perf rows: size count type redop root time algbw busbw #wrong (out of place) ...
busbw=$(awk -v size="$MESSAGE_BYTES" '$1 == size && NF >= 9 { print $8; exit }' "$out")
if [ -z "$busbw" ]; then
  echo "nccl-allreduce: FAIL: no result row for $MESSAGE_BYTES bytes in the all_reduce_perf output" >&2
  exit 1
fi
if [ -z "$THRESHOLD_GBPS" ]; then
  echo "nccl-allreduce: UNJUDGED: busbw ${busbw} GB/s at $MESSAGE_BYTES bytes; no published figure for $SHAPE"
  exit 0
fi
if [ "$SLURM_JOB_NUM_NODES" -lt 2 ]; then
  echo "nccl-allreduce: UNJUDGED: busbw ${busbw} GB/s on one node; the published $SHAPE figure ($EXPECTED_GBPS GB/s) is for 2 nodes over $RDMA_NAME"
  exit 0
fi
if awk -v got="$busbw" -v want="$THRESHOLD_GBPS" 'BEGIN { exit !(got + 0 >= want + 0) }'; then
  echo "nccl-allreduce: PASS: busbw ${busbw} GB/s >= ${THRESHOLD_GBPS} GB/s (published ${EXPECTED_GBPS} GB/s for $SHAPE)"
else
  echo "nccl-allreduce: FAIL: busbw ${busbw} GB/s < ${THRESHOLD_GBPS} GB/s (published ${EXPECTED_GBPS} GB/s for $SHAPE)" >&2
  exit 1
fi
'''


def nccl_allreduce_job(c: SlurmCluster) -> str:
    """all_reduce_perf on every GPU of every node; PASS at busbw ≥ the shape's threshold."""
    f, rt = fabric(c.cloud, c.shape.type), RUNTIMES[c.cloud]
    size = f.allreduce_message_bytes or 2 ** 30  # 1 GiB when no figure names a size
    threshold = f.allreduce_threshold_gbps
    env_names = sorted(f.nccl_env) + (["LD_LIBRARY_PATH"] if rt.ld_library_path else [])
    lines = _header("nccl-allreduce", c, c.shape.gpu_count, gres=True)
    lines += ["# nccl-tests all_reduce_perf across all nodes (written by gpu-cluster).",
              f"# Expected bus bandwidth: catalog/fabric.yaml row {c.shape.type} ({', '.join(f.source)}).",
              "set -euo pipefail",
              shell.assign("SHAPE", c.shape.type),
              shell.assign("GPUS_PER_NODE", c.shape.gpu_count),
              shell.assign("MESSAGE_BYTES", size),
              shell.assign("EXPECTED_GBPS", "" if f.allreduce_busbw_gbps is None else f.allreduce_busbw_gbps),
              shell.assign("THRESHOLD_GBPS", "" if threshold is None else threshold),
              shell.assign("RDMA_NAME", profile(c.cloud).rdma_name),
              shell.assign("DEFAULT_MPIRUN", rt.mpirun),
              shell.array("NCCL_TESTS_GLOBS", rt.nccl_tests_globs),
              shell.array("ENV_VARS", env_names)]
    lines += _env_exports(c)
    return "\n".join(lines) + "\n" + _NCCL_BODY.lstrip("\n")


_HELLO_BODY = r'''
TORCHRUN=${TORCHRUN:-torchrun}
if ! command -v "$TORCHRUN" >/dev/null; then
  echo "torchrun-hello: '$TORCHRUN' not found: install PyTorch (e.g. a venv on the shared file system) and run TORCHRUN=/path/to/torchrun sbatch $0" >&2
  exit 2
fi
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
# The address Slurm registered for the first node (cloud_reg_addrs): no DNS needed.
MASTER_ADDR=$(scontrol show node "$first" -o | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
if [ -z "$MASTER_ADDR" ]; then
  echo "torchrun-hello: no NodeAddr for $first in scontrol show node" >&2
  exit 1
fi
export MASTER_ADDR
echo "torchrun-hello: $SLURM_JOB_NUM_NODES node(s) x $GPUS_PER_NODE GPU(s), rendezvous at $MASTER_ADDR:$PORT"
srun --ntasks-per-node=1 "$TORCHRUN" --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node="$GPUS_PER_NODE" \
  --rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$PORT" "$HELLO_PY"
'''


def torchrun_hello_job(c: SlurmCluster) -> str:
    lines = _header("torchrun-hello", c, 1, gres=True)
    lines += ["# A multi-node torchrun hello-world with the shape's NCCL environment (written by gpu-cluster).",
              f"# NCCL / EFA / RDMA environment: catalog/fabric.yaml row {c.shape.type}.",
              "set -euo pipefail",
              shell.assign("GPUS_PER_NODE", c.shape.gpu_count),
              shell.assign("PORT", HELLO_PORT),
              shell.assign("HELLO_PY", f"{c.paths.jobs}/hello.py")]
    lines += _env_exports(c)
    return "\n".join(lines) + "\n" + _HELLO_BODY.lstrip("\n")


HELLO_PY = '''\
"""torchrun hello-world (written by gpu-cluster): every rank joins one NCCL all_reduce."""
import os
import socket

import torch
import torch.distributed as dist


def main() -> None:
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ["LOCAL_RANK"])
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.ones(1, device="cuda" if use_cuda else "cpu")
    dist.all_reduce(value)
    if int(value.item()) != world:
        raise SystemExit(f"rank {rank}: all_reduce gave {value.item()}, expected {world}")
    print(f"hello from rank {rank}/{world} on {socket.gethostname()} (local rank {local_rank})", flush=True)
    dist.barrier()
    if rank == 0:
        print(f"torchrun-hello: OK, {world} ranks agreed", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def node_health_job(c: SlurmCluster) -> str:
    """The boot health check again on every node; failing nodes are drained with the reason.
    Submit as root (draining a node needs a Slurm administrator)."""
    lines = _header("node-health", c, 1, gres=False)
    lines += ["# Re-run the GPU node health check on every node (written by gpu-cluster).",
              "set -euo pipefail",
              shell.assign("NODE_HEALTH", f"{c.paths.bin}/node-health"),
              'srun --ntasks-per-node=1 "$NODE_HEALTH" --drain']
    return "\n".join(lines) + "\n"


def jobs(c: SlurmCluster) -> dict[str, str]:
    """Every shipped job file: name → content (hello.py is the torchrun job's program)."""
    return {"nccl-allreduce.sbatch": nccl_allreduce_job(c), "torchrun-hello.sbatch": torchrun_hello_job(c),
            "node-health.sbatch": node_health_job(c), "hello.py": HELLO_PY}
