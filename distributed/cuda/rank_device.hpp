// The GPU an MPI rank of a CUDA run uses, from its node-local rank and the GPUs it sees: one home
// for the rule that NcclCommunicator (which selects the device) and the trainer's early check
// (require_cuda_training_available) both follow.
#pragma once

#include <optional>

namespace dflash {

// - A rank that sees one GPU uses it: a launcher that gives each rank a GPU of its own (srun
//   --gpus-per-task=1, CUDA_VISIBLE_DEVICES set per rank) shows every rank its GPU as device 0,
//   whatever its node-local rank. (Ranks that share one visible GPU by mistake are refused by
//   ncclCommInitRank: "Duplicate GPU detected".)
// - A rank that sees several (mpirun on a node, every GPU visible) uses the one at its node-local
//   rank.
// - nullopt: more ranks on the node than the GPUs they see.
inline std::optional<int> rank_device(int node_local_rank, int visible_devices) {
  if (visible_devices == 1 && node_local_rank >= 0) return 0;
  if (node_local_rank >= 0 && node_local_rank < visible_devices) return node_local_rank;
  return std::nullopt;
}

}  // namespace dflash
