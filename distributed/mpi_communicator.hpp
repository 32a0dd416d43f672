// MPI over CPU ranks (OpenMPI; the reference backend and the tests). Every MPI call's return code
// is checked (the communicator's error handler is MPI_ERRORS_RETURN): a failure throws
// CommunicationError naming the call and MPI's message. abort() is MPI_Abort on MPI_COMM_WORLD,
// which ends every rank of the job.
//
// A collective has a time limit (collective_wait.hpp): each is started nonblocking and waited for
// by polling, and one still unfinished after DFLASH_MPI_TIMEOUT_S seconds of the wait's running
// time ends the job (fail_job: the rank guard's message naming the call, then MPI_Abort), where a
// blocking call would wait as long as a stopped peer does. MPI cannot cancel a started collective,
// so there is nothing to unwind to: the job ends at once.
#pragma once

#include <memory>
#include <string_view>

#include "distributed/communicator.hpp"

namespace dflash {

// The environment variable that sets the limit of every MPI collective's wait, in seconds (0: none).
inline constexpr const char* kMpiTimeoutVariable = "DFLASH_MPI_TIMEOUT_S";
// Its default: an hour. The longest healthy wait under it is the peers' while the lead writes a
// checkpoint (20.8 GB at full scale: an hour covers 6 MB/s); a collective of the step itself waits
// for a step's imbalance, seconds. The one wait no limit can bound, the ranks' data scans, has
// none (WaitLimitLifted in dflash train). A stopped rank costs at most this much of the job's
// allocation.
inline constexpr double kDefaultMpiTimeoutS = 3600.0;
// The limit `value` (the variable's value; null or empty: the default) sets; InputError naming the
// variable when it is not a number of seconds >= 0.
double mpi_timeout_seconds(const char* value);

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
  // Over MPI_COMM_WORLD. Reads DFLASH_MPI_TIMEOUT_S (a bad value: InputError, before any collective).
  MpiCommunicator();
  // Ranks of the world with the same `color` form one communicator (ordered by world rank);
  // every world rank must call this (MPI_Comm_split). Tests run R = 1 ... 4 inside one job this way.
  static std::unique_ptr<MpiCommunicator> split(int color);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_ranks() const override { return node_ranks_; }
  std::string_view backend() const override { return "mpi"; }
  void all_reduce(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override;
  void all_gather(const void* send, void* recv, std::size_t count, CommType type) override;
  void broadcast(void* buffer, std::size_t count, CommType type, int root) override;
  double wait_limit_seconds() const override { return timeout_s_; }
  void set_wait_limit_seconds(double seconds) override { timeout_s_ = seconds; }

  // Points to the MPI_Comm (kept opaque so that this header does not need mpi.h), for NCCL's bootstrap.
  const void* native_handle() const;
  // This rank among the ranks that share its node (MPI_COMM_TYPE_SHARED; OpenMPI, Slurm and MPICH
  // alike): the GPU a GPU rank takes. Found by the constructor with node_ranks (a collective, while
  // the ranks start together), so that asking later waits for no peer: a GPU rank asks after a
  // resume, while the lead may still be hashing the checkpoint.
  int node_local_rank() const { return node_local_rank_; }

 protected:
  void end_job(int exit_code) override;

 private:
  struct Handle;  // the MPI_Comm, and whether this object frees it
  explicit MpiCommunicator(std::unique_ptr<Handle> handle);
  // Waits for a started nonblocking collective (`request` points to its MPI_Request) within the limit.
  void wait(void* request, std::string_view call);
  std::unique_ptr<Handle> handle_;
  int rank_ = 0, size_ = 1, node_local_rank_ = 0, node_ranks_ = 1;
  double timeout_s_ = kDefaultMpiTimeoutS;
};

// The process's world: MPI when launched by mpirun/srun, else the single-process communicator.
// `session` is created (MPI_Init) only in the MPI case and must outlive the communicator.
std::unique_ptr<Communicator> make_world_communicator(int* argc, char*** argv, std::unique_ptr<MpiSession>& session);

}  // namespace dflash
