// Prints, as JSON, four optimizer steps (apply_optimizer_step: clipping, schedule, AdamW, §12) of
// the tiny drafter's parameters under given gradients, for adamw_torch_check.py to replay with
// torch.optim.AdamW and torch.nn.utils.clip_grad_norm_. Gradients are drawn from a seed; their
// scale changes per step so that clipping is active in some steps and not in others.
#include <iostream>

#include <nlohmann/json.hpp>

#include "distributed/single_process_communicator.hpp"
#include "distributed/train_step.hpp"
#include "reference/counter_rng.hpp"
#include "tests/distributed/training_problem.hpp"

int main() {
  using namespace dflash;
  const DrafterConfig config = testing::tiny_drafter_config();
  TrainingConfig training = testing::tiny_training_config(1, 1, 1);
  training.warmup_steps = 2;
  training.total_steps = 3;  // the last step runs at min_learning_rate
  SingleProcessCommunicator comm;
  MemoryTracker tracker;
  TrainingState state =
      make_training_state(tracker, config, training, comm, init_drafter_parameters<double>(tracker, config, 3, 0.2));
  const FlatLayout layout(config, 1, training.zero_stage);
  nlohmann::json out;
  out["training"] = training_config_to_json(training);
  for (const FlatTensor& t : layout.tensors()) {
    out["tensors"].push_back({{"name", t.name}, {"shape", t.shape}, {"decay", t.decay}});
  }
  out["initial"] = state.optimizer.master.values();
  const double scales[] = {1.0, 0.001, 0.3, 0.05};  // norms above and below max_grad_norm = 0.5
  CounterRng rng(2026, 0x6AD);
  for (std::size_t step = 0; step < 4; ++step) {
    DrafterParameters<double> grads = make_drafter_parameters<double>(tracker, config, MemoryCategory::gradients);
    std::vector<double> flat;
    grads.for_each([&](const std::string&, Tensor<double>& g) {
      for (std::int64_t i = 0; i < g.numel(); ++i) {
        g[i] = scales[step] * rng.uniform(-1, 1);
        flat.push_back(g[i]);
      }
    });
    const OptimizerStepResult r = apply_optimizer_step(comm, layout, training, state.optimizer, grads, "none");
    out["steps"].push_back({{"gradient", flat}, {"lr", r.lr}, {"grad_norm", r.grad_norm}, {"clipped", r.clipped}});
  }
  std::vector<double> master = state.optimizer.master.values(), m = state.optimizer.exp_avg.values(),
                      v = state.optimizer.exp_avg_sq.values();
  master.resize(static_cast<std::size_t>(layout.count()));
  m.resize(master.size());
  v.resize(master.size());
  out["final"] = {{"params", master}, {"exp_avg", m}, {"exp_avg_sq", v}};
  std::cout.precision(17);
  std::cout << out.dump() << "\n";
  return 0;
}
