#!/bin/bash
# Inner job steps the campaign driver launches, round by round.
# port counters (jobs/node_entry.py): srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --mpi=none <REPO>/.vcluster/demo/node/python -m clusteraccept.probes.counters --rails SPOOL/meta/node-rails.json --out SPOOL/counters --label JOB-sK --meta LABELS
# round 0: intra-node (2 concurrent steps)
srun -N 1 -n 8 --ntasks-per-node=8 -w node1 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env <REPO>/.vcluster/sim/demo/nccl-tests/all_reduce_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
srun -N 1 -n 8 --ntasks-per-node=8 -w node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env <REPO>/.vcluster/sim/demo/nccl-tests/all_reduce_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
wait
# port counters (jobs/node_entry.py): srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --mpi=none <REPO>/.vcluster/demo/node/python -m clusteraccept.probes.counters --rails SPOOL/meta/node-rails.json --out SPOOL/counters --label JOB-sK --meta LABELS
# round 1: sendrecv pairs 1 (8 concurrent steps)
srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env CUDA_VISIBLE_DEVICES=0 NCCL_IB_HCA==mlx5_0:1 NCCL_DEBUG=INFO <REPO>/.vcluster/sim/demo/nccl-tests/sendrecv_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env CUDA_VISIBLE_DEVICES=1 NCCL_IB_HCA==mlx5_1:1 NCCL_DEBUG=INFO <REPO>/.vcluster/sim/demo/nccl-tests/sendrecv_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env CUDA_VISIBLE_DEVICES=2 NCCL_IB_HCA==mlx5_2:1 NCCL_DEBUG=INFO <REPO>/.vcluster/sim/demo/nccl-tests/sendrecv_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env CUDA_VISIBLE_DEVICES=3 NCCL_IB_HCA==mlx5_3:1 NCCL_DEBUG=INFO <REPO>/.vcluster/sim/demo/nccl-tests/sendrecv_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env CUDA_VISIBLE_DEVICES=4 NCCL_IB_HCA==mlx5_4:1 NCCL_DEBUG=INFO <REPO>/.vcluster/sim/demo/nccl-tests/sendrecv_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env CUDA_VISIBLE_DEVICES=5 NCCL_IB_HCA==mlx5_5:1 NCCL_DEBUG=INFO <REPO>/.vcluster/sim/demo/nccl-tests/sendrecv_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env CUDA_VISIBLE_DEVICES=6 NCCL_IB_HCA==mlx5_6:1 NCCL_DEBUG=INFO <REPO>/.vcluster/sim/demo/nccl-tests/sendrecv_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env CUDA_VISIBLE_DEVICES=7 NCCL_IB_HCA==mlx5_7:1 NCCL_DEBUG=INFO <REPO>/.vcluster/sim/demo/nccl-tests/sendrecv_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
wait
# port counters (jobs/node_entry.py): srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --mpi=none <REPO>/.vcluster/demo/node/python -m clusteraccept.probes.counters --rails SPOOL/meta/node-rails.json --out SPOOL/counters --label JOB-sK --meta LABELS
# round 2: block all_reduce (1 concurrent steps)
srun -N 2 -n 16 --ntasks-per-node=8 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env <REPO>/.vcluster/sim/demo/nccl-tests/all_reduce_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
wait
# port counters (jobs/node_entry.py): srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --mpi=none <REPO>/.vcluster/demo/node/python -m clusteraccept.probes.counters --rails SPOOL/meta/node-rails.json --out SPOOL/counters --label JOB-sK --meta LABELS
# round 3: block alltoall (1 concurrent steps)
srun -N 2 -n 16 --ntasks-per-node=8 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --kill-on-bad-exit=1 env <REPO>/.vcluster/sim/demo/nccl-tests/alltoall_perf -b 1073741824 -e 8589934592 -f 2 -g 1 -n 5 -w 1 -c 1 &
wait
# port counters (jobs/node_entry.py): srun -N 2 -n 2 --ntasks-per-node=1 -w node1,node2 --exact --overlap --cpus-per-task=1 -t 2 --mpi=none <REPO>/.vcluster/demo/node/python -m clusteraccept.probes.counters --rails SPOOL/meta/node-rails.json --out SPOOL/counters --label JOB-sK --meta LABELS
