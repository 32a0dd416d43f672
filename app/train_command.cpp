// `dflash train`: the full-scale training entry point (distributed/run/trainer.hpp). Under
// mpirun/srun the rank and world size come from MPI; a plain start is one rank.
#include <iostream>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "distributed/mpi_communicator.hpp"
#include "distributed/rank_guard.hpp"
#include "distributed/run/trainer.hpp"

namespace dflash::app {
namespace {

struct TrainFlags {
  std::string config, data, target, out, init, eval_data, backend = "cpu";
  bool resume = false, force = false, allow_other_data = false;
  std::int64_t save_every = 0, keep = 0, progress_every = 10, eval_every = 0;
};

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "train", "Train a drafter from feature shards (TRAINING §11-§17); run under mpirun for R ranks");
  auto f = std::make_shared<TrainFlags>();
  cmd->add_option("--config", f->config, "Drafter config.json with the training fields (SPEC §1, TRAINING §12)")
      ->required();
  cmd->add_option("--data", f->data, "Directory of feature shards (TRAINING §14)")->required();
  cmd->add_option("--target", f->target,
                  "The target's Hugging Face checkpoint directory (frozen embedding and lm_head)")
      ->required();
  cmd->add_option("--out", f->out, "Run directory: checkpoints, latest, metrics.jsonl")->required();
  cmd->add_option("--init", f->init,
                  "Start from a released drafter directory (TRAINING §16) instead of the seeded init");
  cmd->add_option("--backend", f->backend, "cpu (double reference) or cuda (default cpu)");
  cmd->add_flag("--resume", f->resume, "Continue the run in --out from its latest checkpoint");
  cmd->add_flag("--force", f->force, "Train even when the plan says the step does not fit");
  cmd->add_flag("--allow-other-data", f->allow_other_data,
                "With --resume: continue on a --data set other than the one the checkpoint records (its "
                "shard file names, sizes and sequence count); without it such a resume is refused");
  cmd->add_option("--save-every", f->save_every,
                  "Also save a checkpoint every N steps (default: at the end and on a signal)");
  cmd->add_option("--keep", f->keep, "Keep only the K most recent checkpoints (default: all)");
  cmd->add_option("--eval-data", f->eval_data,
                  "Held-out feature shards: statistics without gradients or dropout to eval.jsonl");
  cmd->add_option("--eval-every", f->eval_every, "Evaluate on --eval-data after every N-th step");
  cmd->add_option("--progress-every", f->progress_every,
                  "Progress line every N steps when stderr is not a terminal (default 10)");
  cmd->callback([f, &exit_code] {
    TrainingRunOptions o;
    o.config = f->config;
    o.data = f->data;
    o.target = f->target;
    o.out = f->out;
    if (!f->init.empty()) o.init = f->init;
    o.backend = parse_training_backend(f->backend);
    o.resume = f->resume;
    o.force = f->force;
    o.allow_other_data = f->allow_other_data;
    o.save_every = f->save_every;
    o.keep = f->keep;
    o.progress_every = f->progress_every;
    if (!f->eval_data.empty()) o.eval_data = f->eval_data;
    o.eval_every = f->eval_every;
    std::unique_ptr<MpiSession> mpi;
    const std::unique_ptr<Communicator> comm = make_world_communicator(nullptr, nullptr, mpi);
    // One rank: errors reach main (message, exit 2). Several: a failing rank ends the whole job.
    exit_code = comm->size() == 1 ? run_training(o, *comm, std::cout)
                                  : run_guarded(*comm, [&] { return run_training(o, *comm, std::cout); });
  });
}

}  // namespace dflash::app
