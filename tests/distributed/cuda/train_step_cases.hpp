// The cases of the CUDA training step (distributed/cuda/train_step_loop.hpp), written once over
// its training backend and run twice: on the GPU (test_cuda_train_step_gpu, _nccl_gpu: the
// CudaTrainingBackend, NCCL) and on the CPU (test_cuda_train_step_cpu, _mpi_cpu: the
// HostTrainingBackend, MPI over 1, 2 and 4 ranks), so that every GPU case has run in CI before a
// GPU runs it. What each case holds the step to, and why, is said above it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common/tolerances.hpp"
#include "distributed/cuda/train_step_loop.hpp"
#include "distributed/run/plan_gate.hpp"
#include "planner/parameter_memory.hpp"
#include "planner/training_plan.hpp"
#include "tests/cuda/optimizer/test_support.hpp"
#include "tests/distributed/bf16_features.hpp"
#include "tests/distributed/cuda/train_test_support.hpp"
#include "tests/distributed/forwarding_communicator.hpp"

namespace dflash::testing {

// The drafter step a backend computes on the working copy, as the training step runs it: the
// flat fp32 gradient (canonical order) and the statistics.
struct DrafterStepGradient {
  std::vector<float> flat;
  LossHeadStats<double> stats;
};
// (host, config, working parameters, frozen, batch, options, W): cuda_drafter_step on the GPU,
// host_drafter_step on the CPU.
using DrafterStepOn = std::function<DrafterStepGradient(
    MemoryTracker&, const DrafterConfig&, const DrafterParameters<double>&, const FrozenWeights<double>&,
    const DrafterBatch<double>&, const DrafterStepOptions&, double)>;

inline std::vector<float> flat_floats(const DrafterParameters<double>& grads) {
  std::vector<float> flat;
  grads.for_each([&](const std::string&, const Tensor<double>& x) {
    for (std::int64_t e = 0; e < x.numel(); ++e) flat.push_back(float(x[e]));
  });
  return flat;
}

// Where an assertion inside a loop between collectives must not return early (the other ranks
// would wait in the next collective): every rank runs to the end and reports.
inline ::testing::AssertionResult equal_on_every_rank(Communicator& comm, const std::vector<double>& mine,
                                                      const char* what) {
  std::vector<double> root = mine;
  comm.broadcast(root.data(), root.size(), CommType::f64, 0);
  for (std::size_t e = 0; e < mine.size(); ++e) {
    if (!(mine[e] == root[e])) {
      return ::testing::AssertionFailure()
             << what << " element " << e << " on rank " << comm.rank() << " is " << mine[e] << ", rank 0's " << root[e];
    }
  }
  return ::testing::AssertionSuccess();
}

// The device communicator of a step, passed through, keeping a copy of what each f32
// reduce-scatter left in this rank's block: under ZeRO-1 the step's own summed gradient shard,
// which the step overwrites with the gathered master before it returns. The collectives are
// synchronous (NCCL's wait for their stream), so `read` after one sees its result.
template <class Backend>
class ShardSumsRecorder final : public ForwardingCommunicator {
 public:
  ShardSumsRecorder(Communicator& inner, const Backend& be) : ForwardingCommunicator(inner), be_(be) {}
  void reduce_scatter(const void* send, void* recv, std::size_t count, CommType type, CommOp op) override {
    ForwardingCommunicator::reduce_scatter(send, recv, count, type, op);
    if (type != CommType::f32) return;
    sums.resize(count);
    be_.read(sums.data(), recv, count * sizeof(float));
    ++calls;
  }

  std::vector<float> sums;  // the last f32 reduce-scatter's block on this rank
  int calls = 0;            // f32 reduce-scatters so far

 private:
  const Backend& be_;
};

// Three steps on R = comms' ranks (each its share of the global batch), under `zero`, with a
// warm-up of 2 steps (lr_0 half the peak: the optimizer must apply the schedule's lr_t, which the
// double AdamW below takes step by step). Held to:
//   - the gradient, against the backend's drafter step on each rank's share (the same code: a view,
//     zeroing, W or share mistake shows), summed over ranks in fp32 in rank order: on one rank
//     bitwise; on R ranks each element within 2 (R - 1) u of the sum of the ranks' |g| (any two
//     orders of R fp32 additions differ by at most that), read back where the step leaves the sums
//     (ZeRO-0: the whole vector; ZeRO-1: each rank's shard as the reduce-scatter left it, recorded
//     by ShardSumsRecorder before the step overwrites it with the gathered master, and gathered);
//   - the norm: bitwise the host program of the same tree where the step's tree is one tree over
//     the whole gradient (ZeRO-0, or one rank); ZeRO-1 on R ranks sums R shards' trees in double,
//     within kCrossRankNormTolerance;
//   - the optimizer, under the fp32 rule: the fp32 master weights and moments, gathered from every
//     shard, equal a double AdamW of §12 (tests/cuda/optimizer/test_support.hpp) applied to the
//     step's own summed gradient (read back as above, so exact at any R whatever order the
//     communicator sums in) with the clip factor of its norm. A shard offset dropped from the
//     update, the reduce-scatter or the all-gather moves an element by ~lr, far outside the rule;
//   - what precision cannot change, exactly against the reference train_step on the same ranks:
//     W, tokens, lr, step; the loss, ce and kl each as the sum of the ranks' (kReferenceTolerance:
//     the order of a double sum);
//   - every rank's master, moments and working copy bitwise rank 0's.
template <class Backend>
void expect_steps_follow_the_rule_of_each_part(const Backend& be, CudaCommunicators comms, int zero,
                                               const DrafterStepOn& drafter_step) {
  Communicator& comm = comms.host;
  const int R = comm.size(), r = comm.rank();
  CudaTinyProblem p(zero);
  p.training.warmup_steps = 2;
  p.training.min_learning_rate = p.training.learning_rate;
  const FlatLayout layout(p.config, R, zero);
  const std::size_t P = std::size_t(layout.count());
  ShardSumsRecorder<Backend> recorder(comms.device, be);
  DeviceTrainingState<Backend> state(be, {comms.host, recorder}, p.config, p.training, p.frozen, p.initial_state(R, r));
  TinyTrainer reference(comm, p.training);  // the same initial parameters and frozen weights (seeds 3, 5)

  const HostDecayTable table = decay_table(layout);
  TestFlat flat(layout.count());
  flat.ends = table.ends;
  flat.decay = table.decay;
  const TestAdamW h{p.training.learning_rate, p.training.weight_decay, p.training.adam_beta1,
                    p.training.adam_beta2,    p.training.adam_epsilon, p.training.max_grad_norm};
  const auto floats = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  const std::array<std::vector<double>, 3> start = snapshot(state, p.config).full;
  DoubleAdamW adamw(floats(start[0]), flat, h);

  for (std::int64_t t = 0; t < kCudaSteps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t) + ", rank " + std::to_string(r) + " of " + std::to_string(R));
    const DrafterBatch<double> mine = p.share(t, R, r);
    const std::int64_t first = CudaTinyProblem::first_of(R, r);
    const RankSequences share{first, &mine};
    MemoryTracker host;
    const DrafterStepOptions options =
        drafter_step_options(p.config, std::uint32_t(t), static_cast<std::uint32_t>(first));
    double W = drafter_weight_sum(p.config, mine, options);
    all_reduce_sum(comm, std::span<double>(&W, 1));
    const DrafterParameters<double> working = state.working_parameters(host, p.config);
    const DrafterStepGradient local = drafter_step(host, p.config, working, p.frozen, mine, options, W);
    EXPECT_EQ(local.flat.size(), P);
    std::vector<float> every(P * std::size_t(R));  // block q: rank q's gradient
    comm.all_gather(local.flat.data(), every.data(), P, CommType::f32);
    std::vector<float> summed(every.begin(), every.begin() + std::ptrdiff_t(P));
    std::vector<double> magnitude(P, 0.0);  // the sum over ranks of |g|
    for (int q = 0; q < R; ++q) {
      for (std::size_t e = 0; e < P; ++e) {
        if (q > 0) summed[e] += every[std::size_t(q) * P + e];
        magnitude[e] += std::abs(double(every[std::size_t(q) * P + e]));
      }
    }
    double totals[4] = {local.stats.loss, double(local.stats.valid_rows), local.stats.ce, local.stats.kl};
    all_reduce_sum(comm, std::span<double>(totals, 4));

    const StepMetrics m = train_step_on(host, state, p.config, p.training, {&share, 1});
    const StepMetrics ref =
        train_step(reference.tracker, comm, p.config, p.training, reference.frozen, reference.state, {&share, 1});

    std::vector<float> g(P);  // the step's own sums
    if (zero == 0) {
      be.read(g.data(), state.gradient(), P * sizeof(float));
    } else {
      EXPECT_EQ(recorder.calls, t + 1) << "one reduce-scatter of the gradient a step";
      const std::size_t s = std::size_t(layout.shard_size());
      std::vector<float> shards(s * std::size_t(R));
      recorder.sums.resize(s);  // a missing reduce-scatter fails above; the gather must still run
      comm.all_gather(recorder.sums.data(), shards.data(), s, CommType::f32);
      std::copy_n(shards.begin(), std::ptrdiff_t(P), g.begin());
    }
    std::size_t off = P;
    for (std::size_t e = 0; e < P && off == P; ++e) {
      if (!(std::abs(double(g[e]) - double(summed[e])) <= 2.0 * (R - 1) * kFp32Unit * magnitude[e])) off = e;
    }
    EXPECT_EQ(off, P) << "gradient element " << off << ": " << g[off % P] << " against the sum " << summed[off % P];
    for (const auto& [name, got, want] : {std::tuple{"loss", m.loss, totals[0]}, std::tuple{"ce", m.ce, totals[2]},
                                          std::tuple{"kl", m.kl, totals[3]}}) {
      if (R == 1) {
        EXPECT_EQ(got, want) << name;
      } else {
        EXPECT_NEAR(got, want, kReferenceTolerance * std::abs(want)) << name;
      }
    }
    EXPECT_GT(m.kl, 0.0);  // kl and ce are told apart
    EXPECT_NE(m.kl, m.ce);
    EXPECT_EQ(double(m.tokens), totals[1]);
    EXPECT_EQ(m.weight_sum, W);
    EXPECT_EQ(m.weight_sum, ref.weight_sum);
    EXPECT_EQ(m.tokens, ref.tokens);
    EXPECT_EQ(m.lr, ref.lr);
    EXPECT_EQ(m.step, t);

    const double norm = std::sqrt(squared_norm_on_host(g, false));
    if (zero == 0 || R == 1) {
      EXPECT_EQ(m.grad_norm, norm);
    } else {
      EXPECT_NEAR(m.grad_norm, norm, kCrossRankNormTolerance * norm);
    }
    const double clip = clip_coefficient(m.grad_norm, h.max_norm);
    EXPECT_EQ(m.clipped, clip < 1.0);
    const CudaStateSnapshot now = snapshot(state, p.config);
    if (t == 0) {
      EXPECT_LT(m.lr, p.training.learning_rate) << "the warm-up's first lr is not below the peak";
    }
    adamw.step(g, clip, t, m.lr);  // m.lr is the reference's schedule (above)
    EXPECT_TRUE(adamw.within_fp32_rule(floats(now.full[0]), floats(now.full[1]), floats(now.full[2])));
    EXPECT_EQ(now.step, t + 1);
    EXPECT_TRUE(equal_on_every_rank(comm, now.full[0], "master"));
    EXPECT_TRUE(equal_on_every_rank(comm, now.full[1], "exp_avg"));
    EXPECT_TRUE(equal_on_every_rank(comm, now.full[2], "exp_avg_sq"));
    EXPECT_TRUE(equal_on_every_rank(comm, now.working, "working copy"));
  }
  EXPECT_EQ(reference.state.optimizer.step, kCudaSteps);
}

// One rank: the per-row hits behind the block statistics are the loss head's own (they count the
// step's accuracy exactly), on the reference's rows, equal to the reference's on kHitAgreement.
template <class Backend>
void expect_block_hits_of_the_loss_head(const Backend& be, Communicator& comm) {
  CudaTinyProblem p(0);
  DeviceTrainingState<Backend> state(be, {comm, comm}, p.config, p.training, p.frozen, p.initial_state(1, 0));
  TinyTrainer reference(comm, p.training);
  std::int64_t labelled = 0, equal = 0, cuda_hits = 0, reference_hits = 0;
  for (std::int64_t t = 0; t < kCudaSteps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    const DrafterBatch<double> batch = p.global_batch(t);
    const RankSequences mine{0, &batch};
    MemoryTracker host;
    const StepMetrics m = train_step_on(host, state, p.config, p.training, {&mine, 1});
    const StepMetrics ref =
        train_step(reference.tracker, comm, p.config, p.training, reference.frozen, reference.state, {&mine, 1});
    ASSERT_EQ(m.sequence_hits.size(), std::size_t(kCudaGlobalBatch));
    ASSERT_EQ(ref.sequence_hits.size(), std::size_t(kCudaGlobalBatch));
    std::int64_t step_hits = 0;
    for (std::size_t b = 0; b < m.sequence_hits.size(); ++b) {
      const SequenceHits &c = m.sequence_hits[b], &rr = ref.sequence_hits[b];
      ASSERT_EQ(c.keep, rr.keep) << "sequence " << b;
      ASSERT_EQ(c.labelled, rr.labelled) << "sequence " << b;
      ASSERT_EQ(c.hits.size(), rr.hits.size()) << "sequence " << b;
      for (std::size_t i = 0; i < c.hits.size(); ++i) {
        if (c.labelled[i] == 0) {
          ASSERT_EQ(c.hits[i], 0) << "sequence " << b << " row " << i << " has no label";
          continue;
        }
        ++labelled;
        equal += c.hits[i] == rr.hits[i] ? 1 : 0;
        step_hits += c.hits[i];
        reference_hits += rr.hits[i];
      }
    }
    EXPECT_EQ(double(step_hits), std::round(m.accuracy * double(m.tokens)));
    cuda_hits += step_hits;
  }
  ASSERT_GT(labelled, 0);
  EXPECT_GT(reference_hits, 0);  // the agreement is not that of two all-miss vectors
  EXPECT_GT(cuda_hits, 0);
  EXPECT_GE(double(equal), kHitAgreement * double(labelled)) << equal << " of " << labelled << " rows agree";
}

// One rank: ZeRO-1's path (reduce-scatter, the shard's norm, the all-gather) equals ZeRO-0's
// bitwise, three steps: on one rank both take the same tree over the same elements.
template <class Backend>
void expect_zero_one_is_zero_zero_on_one_rank(const Backend& be, Communicator& comm) {
  CudaTinyProblem p0(0), p1(1);
  DeviceTrainingState<Backend> zero0(be, {comm, comm}, p0.config, p0.training, p0.frozen, p0.initial_state(1, 0));
  DeviceTrainingState<Backend> zero1(be, {comm, comm}, p1.config, p1.training, p1.frozen, p1.initial_state(1, 0));
  for (std::int64_t t = 0; t < kCudaSteps; ++t) {
    const DrafterBatch<double> batch = p0.global_batch(t);
    const RankSequences mine{0, &batch};
    MemoryTracker host;
    const StepMetrics a = train_step_on(host, zero0, p0.config, p0.training, {&mine, 1});
    const StepMetrics b = train_step_on(host, zero1, p1.config, p1.training, {&mine, 1});
    EXPECT_EQ(metrics_vector(a), metrics_vector(b)) << "step " << t;
  }
  const CudaStateSnapshot a = snapshot(zero0, p0.config), b = snapshot(zero1, p1.config);
  EXPECT_EQ(a.full, b.full);
  EXPECT_EQ(a.working, b.working);
}

// One rank: the step handed each sequence's F and G already rounded to bf16 (as `dflash train`
// hands them: distributed/rank_sequences.hpp) is bitwise the step handed them in double, three
// steps, metrics and state: its uploads round the doubles to the same bits.
template <class Backend>
void expect_bf16_features_are_the_doubles_rounded(const Backend& be, Communicator& comm) {
  CudaTinyProblem p(1);
  DeviceTrainingState<Backend> doubles(be, {comm, comm}, p.config, p.training, p.frozen, p.initial_state(1, 0));
  DeviceTrainingState<Backend> rounded(be, {comm, comm}, p.config, p.training, p.frozen, p.initial_state(1, 0));
  for (std::int64_t t = 0; t < kCudaSteps; ++t) {
    const DrafterBatch<double> batch = p.global_batch(t);
    DrafterBatch<double> shell = convert_batch<double>(p.tracker, batch);
    const Bf16Features features = round_features_to_bf16(p.tracker, shell);
    ASSERT_EQ(shell.target_features.numel(), 0);
    const RankSequences in_double{0, &batch}, in_bf16{0, &shell, &features};
    MemoryTracker host;
    const StepMetrics a = train_step_on(host, doubles, p.config, p.training, {&in_double, 1});
    const StepMetrics b = train_step_on(host, rounded, p.config, p.training, {&in_bf16, 1});
    EXPECT_EQ(metrics_vector(a), metrics_vector(b)) << "step " << t;
    EXPECT_GT(a.weight_sum, 0.0);
  }
  const CudaStateSnapshot a = snapshot(doubles, p.config), b = snapshot(rounded, p.config);
  EXPECT_EQ(a.full, b.full);
  EXPECT_EQ(a.working, b.working);
}

// The host OptimizerState round trips (rounded to fp32) and the working copy is the master
// rounded: bf16 matrices, fp32 norm weights.
template <class Backend>
void expect_host_state_round_trip(const Backend& be, Communicator& comm) {
  CudaTinyProblem p(1);
  const OptimizerState host = p.initial_state(1, 0);
  DeviceTrainingState<Backend> state(be, {comm, comm}, p.config, p.training, p.frozen, host);
  MemoryTracker tracker;
  const OptimizerState back = state.host_state(tracker);
  ASSERT_EQ(back.master.numel(), host.master.numel());
  for (std::int64_t e = 0; e < host.master.numel(); ++e) {
    ASSERT_EQ(back.master[e], double(float(host.master[e]))) << "master element " << e;
  }
  const DrafterParameters<double> working = state.working_parameters(tracker, p.config);
  const FlatLayout layout(p.config, 1, 1);
  std::size_t t = 0;
  working.for_each([&](const std::string& name, const Tensor<double>& x) {
    const FlatTensor& ft = layout.tensors()[t++];
    for (std::int64_t e = 0; e < x.numel(); ++e) {
      const float master = float(host.master[ft.offset + e]);
      const double want = x.rank() == 2 ? double(round_to_bf16(master)) : double(master);
      ASSERT_EQ(x[e], want) << name << " element " << e;
    }
  });
}

// ZeRO-1 on one rank: the shard is P padded to 128 (1152), the state keeps only P (1056). The
// state's memory per category equals the plan `dflash train --backend cuda` makes, and the step's
// (gradients without dL/dF, inputs, saved, outputs) equals the plan at the batch's shapes, to the
// byte. `memory` counts what the backend holds, nothing else.
template <class Backend>
void expect_state_memory_is_the_plans(const Backend& be, const MemoryTracker& memory, Communicator& comm) {
  CudaTinyProblem p(1);
  const PlanRequest request =
      training_plan_request(p.config, p.training, 1, TrainingBackend::cuda, single_rank_hosts());
  ASSERT_TRUE(request.layout.in_place_flat);
  // The step's plan (its parameters: bf16 matrices, fp32 norm weights), and of its gradients the
  // state's flat part alone (the plan adds the loss head's dL/dY, alive only within a step).
  const CategoryBytes plan = plan_training_memory(request).categories;
  const std::int64_t flat_gradient =
      parameter_memory(drafter_parameter_counts(p.config), request.precision, request.layout)[PlanCategory::gradients];
  DeviceTrainingState<Backend> state(be, {comm, comm}, p.config, p.training, p.frozen, p.initial_state(1, 0));
  auto expect_state_bytes = [&](const char* when, bool peak) {
    auto bytes = [&](MemoryCategory c) { return std::int64_t(peak ? memory.peak(c) : memory.current(c)); };
    EXPECT_EQ(bytes(MemoryCategory::parameters), plan[PlanCategory::parameters]) << when;
    EXPECT_EQ(bytes(MemoryCategory::frozen), plan[PlanCategory::frozen]) << when;
    EXPECT_EQ(bytes(MemoryCategory::optimizer),
              plan[PlanCategory::master_weights] + plan[PlanCategory::optimizer_state])
        << when;
    EXPECT_EQ(bytes(MemoryCategory::communication), plan[PlanCategory::communication]) << when;
  };
  expect_state_bytes("after the state is made", false);
  EXPECT_EQ(std::int64_t(memory.current(MemoryCategory::gradients)), flat_gradient);
  EXPECT_EQ(flat_gradient, 4 * 1152);
  EXPECT_EQ(plan[PlanCategory::optimizer_state], 8 * 1056);
  const DrafterBatch<double> batch = p.global_batch(0);
  const RankSequences mine{0, &batch};
  MemoryTracker host;
  train_step_on(host, state, p.config, p.training, {&mine, 1});
  expect_state_bytes("peak over a step", true);

  // What the step adds, for the batch's shapes, to the byte: gradients are the flat vector and one
  // sequence's dL/dY, and no dL/dF (the features are inputs, TRAINING §14; the plan counted one
  // sequence's fp32 dL/dF before features_grad); the inputs, saved tensors and outputs of one
  // sequence at a time.
  PlanRequest shaped = request;
  shaped.tokens = batch.anchor_slots(p.config) * p.config.block_size;
  shaped.context = batch.context_length();
  const CategoryBytes step_plan = plan_training_memory(shaped).categories;
  for (const auto& [m, c] :
       {std::pair{MemoryCategory::gradients, PlanCategory::gradients},
        std::pair{MemoryCategory::inputs, PlanCategory::inputs}, std::pair{MemoryCategory::saved, PlanCategory::saved},
        std::pair{MemoryCategory::loss_saved, PlanCategory::loss_saved},
        std::pair{MemoryCategory::outputs, PlanCategory::outputs}}) {
    EXPECT_EQ(std::int64_t(memory.peak(m)), step_plan[c]) << category_name(m);
  }
}

// On the ranks of `comms` (each its share), against the step on one process (`single`) over the
// whole global batch, which every rank also runs: on one rank bitwise equal, three steps; on R
// ranks W, tokens and lr exactly, the first step's loss within kReferenceTolerance (each
// sequence's loss is the same on any rank, only the order of the double sum changes) and its
// gradient norm within kCrossRankNormTolerance. Needs R to divide the global batch.
template <class Backend>
void expect_ranks_equal_the_single_process_step(const Backend& be, CudaCommunicators comms, Communicator& single,
                                                int zero) {
  const int R = comms.host.size(), r = comms.host.rank();
  CudaTinyProblem p(zero);
  DeviceTrainingState<Backend> ranks(be, comms, p.config, p.training, p.frozen, p.initial_state(R, r));
  DeviceTrainingState<Backend> one(be, {single, single}, p.config, p.training, p.frozen, p.initial_state(1, 0));
  for (std::int64_t t = 0; t < kCudaSteps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    const DrafterBatch<double> all = p.global_batch(t), mine = p.share(t, R, r);
    const RankSequences whole{0, &all}, share{CudaTinyProblem::first_of(R, r), &mine};
    MemoryTracker host;
    const StepMetrics a = train_step_on(host, ranks, p.config, p.training, {&share, 1});
    const StepMetrics b = train_step_on(host, one, p.config, p.training, {&whole, 1});
    if (R == 1) {
      EXPECT_EQ(metrics_vector(a), metrics_vector(b));
      continue;
    }
    EXPECT_EQ(a.weight_sum, b.weight_sum);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.lr, b.lr);
    if (t == 0) {
      EXPECT_NEAR(a.loss, b.loss, kReferenceTolerance * std::abs(b.loss));
      EXPECT_NEAR(a.grad_norm, b.grad_norm, kCrossRankNormTolerance * b.grad_norm);
    }
  }
  if (R == 1) {
    const CudaStateSnapshot a = snapshot(ranks, p.config), b = snapshot(one, p.config);
    EXPECT_EQ(a.full, b.full);
    EXPECT_EQ(a.working, b.working);
  }
}

// ZeRO-0's buckets summed while the backward runs, against the same buckets all after the
// backward (TrainStepOptions::reduce_during_backward): the same collective on the same data, so
// bitwise the same metrics, master weights, moments and working copy over three steps, on every
// rank, for 512 B buckets (many per layer: most are issued before layer 0's backward) and the
// default 25 MiB (one bucket: after fc), and with the rank's share in two groups of sequences (the
// buckets follow the last group's backward). On R >= 2 ranks it fails if a bucket is summed before its
// gradients are final (issued too early; on the GPU also the communication stream not waiting for
// the compute stream's work) or the norm reads the gradient before the sums land; on one rank the
// in-place sum changes nothing, and it checks that the path runs and leaves the step as it was.
template <class Backend>
void expect_buckets_during_the_backward_equal_buckets_after_it(const Backend& be, CudaCommunicators comms) {
  const int R = comms.host.size(), r = comms.host.rank();
  CudaTinyProblem p(0);
  // The rank's share as one group of sequences, and as two (its halves, as a trainer hands over
  // several): the buckets go to the communicator during the backward of the last group only.
  for (const auto& [bucket_bytes, groups] :
       {std::pair{std::int64_t(512), 1}, std::pair{kDefaultBucketBytes, 1}, std::pair{std::int64_t(512), 2}}) {
    SCOPED_TRACE("bucket " + std::to_string(bucket_bytes) + " B, " + std::to_string(groups) + " groups");
    DeviceTrainingState<Backend> during(be, comms, p.config, p.training, p.frozen, p.initial_state(R, r));
    DeviceTrainingState<Backend> after(be, comms, p.config, p.training, p.frozen, p.initial_state(R, r));
    for (std::int64_t t = 0; t < kCudaSteps; ++t) {
      std::vector<DrafterBatch<double>> batches;
      batches.reserve(std::size_t(groups));  // share points into it
      std::vector<RankSequences> share;
      for (int h = 0; h < groups; ++h) {
        batches.push_back(p.rank_batch(t, groups * R, groups * r + h));
        share.push_back({CudaTinyProblem::first_of(groups * R, groups * r + h), &batches.back()});
      }
      MemoryTracker host;
      const StepMetrics a = train_step_on(host, during, p.config, p.training, share,
                                          {.bucket_bytes = bucket_bytes, .reduce_during_backward = true});
      const StepMetrics b = train_step_on(host, after, p.config, p.training, share,
                                          {.bucket_bytes = bucket_bytes, .reduce_during_backward = false});
      EXPECT_EQ(metrics_vector(a), metrics_vector(b)) << "step " << t;
    }
    const CudaStateSnapshot a = snapshot(during, p.config), b = snapshot(after, p.config);
    EXPECT_EQ(a.full, b.full);
    EXPECT_EQ(a.working, b.working);
  }
}

// A device communicator whose bucket sums fail in flight (NCCL: a peer or the network lost), as
// NcclCommunicator::wait_for_stream reports it: the wait throws CommunicationError.
class FailingSumsCommunicator final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  void wait_for_stream(void*) override {
    ++waits;
    throw CommunicationError("NCCL ncclAllReduce (on the caller's stream) failed while in flight: remote error");
  }
  int waits = 0;
};

// ZeRO-0's bucket sums run on the communication stream and are waited for through the device
// communicator before anything reads them: a sum that fails in flight fails the step with the
// communicator's error (where cudaStreamSynchronize would hang the rank), once, after the
// backward, and nothing is applied: master, moments, working copy and step as they were.
template <class Backend>
void expect_a_bucket_sum_failed_in_flight_fails_the_step(const Backend& be, CudaCommunicators comms) {
  const int R = comms.host.size(), r = comms.host.rank();
  CudaTinyProblem p(0);
  FailingSumsCommunicator failing(comms.device);
  DeviceTrainingState<Backend> state(be, {comms.host, failing}, p.config, p.training, p.frozen, p.initial_state(R, r));
  const CudaStateSnapshot before = snapshot(state, p.config);
  const DrafterBatch<double> mine = p.share(0, R, r);
  const RankSequences share{CudaTinyProblem::first_of(R, r), &mine};
  MemoryTracker host;
  try {
    train_step_on(host, state, p.config, p.training, {&share, 1}, {.bucket_bytes = 512});
    ADD_FAILURE() << "the step returned on rank " << r;
  } catch (const CommunicationError& e) {
    EXPECT_NE(std::string(e.what()).find("failed while in flight"), std::string::npos) << e.what();
  }
  EXPECT_EQ(failing.waits, 1);
  const CudaStateSnapshot after = snapshot(state, p.config);
  EXPECT_EQ(after.step, before.step);
  EXPECT_EQ(after.full, before.full);
  EXPECT_EQ(after.working, before.working);
}

// §12 on R ranks: the last rank's teacher rows are 3e38 (finite in bf16, so accepted as input),
// which overflows its fp32 teacher logits W_lm G: its loss and every gradient become NaN. Every
// rank then throws the same NonFiniteStepError naming that rank and the first tensor in canonical
// order (ZeRO-0: from the norms taken before its buckets were summed), and nothing is applied
// anywhere: master, moments, working copy and step as they were.
template <class Backend>
void expect_non_finite_on_one_rank_stops_every_rank(const Backend& be, CudaCommunicators comms, int zero) {
  const int R = comms.host.size(), r = comms.host.rank();
  CudaTinyProblem p(zero);
  DeviceTrainingState<Backend> state(be, comms, p.config, p.training, p.frozen, p.initial_state(R, r));
  const CudaStateSnapshot before = snapshot(state, p.config);
  DrafterBatch<double> mine = p.share(0, R, r);
  if (r == R - 1) std::fill(mine.teacher_hidden.data(), mine.teacher_hidden.data() + mine.teacher_hidden.numel(), 3e38);
  const RankSequences share{CudaTinyProblem::first_of(R, r), &mine};
  MemoryTracker host;
  try {
    train_step_on(host, state, p.config, p.training, {&share, 1}, {.last_good_checkpoint = "run/step-00000041"});
    ADD_FAILURE() << "the step was applied on rank " << r;
  } catch (const NonFiniteStepError& e) {
    EXPECT_EQ(e.step(), 0);
    EXPECT_EQ(e.rank(), R - 1);
    EXPECT_EQ(e.tensor(), FlatLayout(p.config, R, zero).tensors().front().name);
    const std::string what = e.what();
    for (const std::string& part : {std::string("at step 0"), str("on rank ", R - 1),
                                    std::string("not applied on any rank"), std::string("run/step-00000041")}) {
      EXPECT_NE(what.find(part), std::string::npos) << part << " not in: " << what;
    }
  }
  const CudaStateSnapshot after = snapshot(state, p.config);
  EXPECT_EQ(after.step, before.step);
  EXPECT_EQ(after.full, before.full);
  EXPECT_EQ(after.working, before.working);
}

// The frozen weights go to the backend a piece at a time (upload_frozen_bf16): a tensor of two
// whole pieces and a short one arrives as the bits a whole upload gives (upload_bf16_to), every
// element read once, no read longer than kFrozenPieceElements; a non-finite value in the last
// piece ends the upload with the source's error, and the buffer made for it is freed.
template <class Backend>
void expect_frozen_weights_uploaded_a_piece_at_a_time(const Backend& be, const MemoryTracker& memory) {
  class RecordingSource final : public FrozenWeightSource {
   public:
    explicit RecordingSource(const std::vector<double>& values) : times_read(values.size(), 0), values_(values) {}
    void read(FrozenTensor which, std::int64_t first, std::span<double> out) const override {
      EXPECT_EQ(which, FrozenTensor::lm_head);
      largest = std::max(largest, std::int64_t(out.size()));
      for (std::size_t i = 0; i < out.size(); ++i) {
        ++times_read[std::size_t(first) + i];
        out[i] = values_[std::size_t(first) + i];
        if (!std::isfinite(out[i])) throw_input_error("planted", str("element ", first + std::int64_t(i)));
      }
    }
    mutable std::vector<int> times_read;
    mutable std::int64_t largest = 0;

   private:
    const std::vector<double>& values_;
  };
  const std::int64_t n = 2 * kFrozenPieceElements + 1000;
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[std::size_t(i)] = std::ldexp(double((i * 7919) % 65521) - 32760.5, -9);
  const RecordingSource source(values);
  const auto pieces = upload_frozen_bf16(be, source, FrozenTensor::lm_head, n);
  const auto whole = upload_bf16_to(be, MemoryCategory::frozen, values.data(), n);
  const std::vector<Bf16Bits> got = be.to_host(pieces), want = be.to_host(whole);
  EXPECT_TRUE(got == want) << "the pieces' bits differ from the whole upload's";
  EXPECT_EQ(std::count(source.times_read.begin(), source.times_read.end(), 1), n) << "every element read once";
  EXPECT_EQ(source.largest, kFrozenPieceElements);

  values[std::size_t(n - 3)] = std::numeric_limits<double>::infinity();
  const std::size_t before = memory.current(MemoryCategory::frozen);
  try {
    upload_frozen_bf16(be, RecordingSource(values), FrozenTensor::lm_head, n);
    ADD_FAILURE() << "a non-finite value was uploaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(str("element ", n - 3)), std::string::npos) << e.what();
  }
  EXPECT_EQ(memory.current(MemoryCategory::frozen), before);
}

}  // namespace dflash::testing
