// MPI over CPU ranks (OpenMPI; the reference backend and the tests). Every MPI call's return code
// is checked (the communicator's error handler is MPI_ERRORS_RETURN): a failure throws
// CommunicationError naming the call and MPI's message. abort() is MPI_Abort on MPI_COMM_WORLD,
// which ends every rank of the job.
#pragma once

#include <memory>

#include "distributed/communicator.hpp"

namespace dflash {

// Owns MPI_Init_thread / MPI_Finalize for the process (one per process, before any MPI call).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  // True when the process was started by an MPI launcher (mpirun, srun): the environment names a rank.
  static bool launched_by_mpi();
};

class MpiCommunicator final : public Communicator {
 public:
  // Over MPI_COMM_WORLD.
  MpiCommunicator();
  // Ranks of the world with the same `color` form one communicator (ordered by world rank);
  // every world rank must call this (MPI_Comm_split). Tests run R = 1 ... 4 inside one job this way.
  static std::unique_ptr<MpiCommunicator> split(int color);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }
  void all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override;
  void all_gather(const void* send, void* recv, std::size_t count, CommType type) override;
  void broadcast(void* buffer, std::size_t count, CommType type, int root) override;

  // Points to the MPI_Comm (kept opaque so that this header does not need mpi.h), for NCCL's bootstrap.
  const void* native_handle() const;
  // This rank among the ranks that share its node (MPI_COMM_TYPE_SHARED; OpenMPI, Slurm and MPICH
  // alike): the GPU a GPU rank takes. A collective over this communicator.
  int node_local_rank() const;

 protected:
  void end_job(int exit_code) override;

 private:
  struct Handle;  // the MPI_Comm, and whether this object frees it
  explicit MpiCommunicator(std::unique_ptr<Handle> handle);
  std::unique_ptr<Handle> handle_;
  int rank_ = 0, size_ = 1;
};

// The process's world: MPI when launched by mpirun/srun, else the single-process communicator.
// `session` is created (MPI_Init) only in the MPI case and must outlive the communicator.
std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv, std::unique_ptr<MpiSession>& session);

}  // namespace dflash
