#!/bin/sh
# mpirun for the tests: NP ranks on this node. Ranks do not share a GPU, so when they are to
# run on the cuda backend (GRIDSPAN_BACKEND=cuda, as scripts/gpu-check.sh asks) and the
# node has fewer GPUs than ranks, they run on the cpu backend instead, and say so.
#   mpirun.sh MPIEXEC NUMPROC_FLAG NP args...
exe=$1 flag=$2 np=$3
shift 3
if [ "${GRIDSPAN_BACKEND:-auto}" != cpu ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "$gpus" -gt 0 ] && [ "$gpus" -lt "$np" ]; then
    echo "mpirun.sh: $np ranks, $gpus GPU(s) on this node: the ranks run on cpu devices"
    export GRIDSPAN_BACKEND=cpu
  fi
fi
exec "$exe" "$flag" "$np" "$@"
