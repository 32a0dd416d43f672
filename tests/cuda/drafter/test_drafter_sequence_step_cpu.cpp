// The device step's own code on the CPU, in every CI run: cuda_drafter_sequence_step
// (cuda/drafter/sequence_step.hpp) over a batch's sequences, the trunk on HostBackend<Bf16Bits> and
// the loss head's chunk loop on HostLossHeadBackend (harness/cuda/drafter_step_twin.hpp,
// host_drafter_step), on the tiny and mid configs with dropout:
//  - every trunk policy x loss policy gives the same bits (the CPU backend's arithmetic for a value
//    does not depend on what is kept or recomputed, nor on how rows are chunked), so a wrong
//    recompute boundary, a gradient handed to the wrong sequence or a row listed wrongly shows;
//  - the result is within SPEC §10's rule of the double reference step, the plain bf16 step
//    (plain_bf16_drafter_step) being the plain computation: the device's code computes the step.
//    The cases with 4 anchor slots are the GPU rule test's (test_drafter_step_rule_gpu.cpp), so this
//    previews it; mid with 2 slots is the one that showed the plain step must round the
//    tensor-core forward's f P to bf16 as the kernel does (AttentionProblem::round_product_operands_to_bf16);
//  - each sequence's per-row hit flags are those of its labelled rows whose argmax is the label:
//    never set on an unlabelled row, and as many as the step counts correct;
//  - the forward alone (evaluation, cuda_drafter_forward_sequences' loop) gives the step's
//    statistics and hits bitwise and makes no gradient;
//  - the step's peaks per category are what `dflash plan` plans for the same shapes (the CPU twin
//    of test_drafter_step_gpu's PeaksPerCategoryAsPlanned).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness/cuda/config_path.hpp"
#include "harness/cuda/drafter_step_twin.hpp"
#include "reference/drafter_problem.hpp"
#include "tests/cuda/drafter/step_plan_support.hpp"

namespace dflash {
namespace {

struct PolicyPair {
  TrunkPolicy trunk;
  LossPolicy loss;
};
const PolicyPair kPolicies[] = {
    {TrunkPolicy::per_layer, LossPolicy::chunk_recompute},
    {TrunkPolicy::none, LossPolicy::chunk_recompute},
    {TrunkPolicy::every_k, LossPolicy::chunk_recompute},
    {TrunkPolicy::per_layer, LossPolicy::chunk_grad_in_forward},
    {TrunkPolicy::every_k, LossPolicy::chunk_grad_in_forward},
    {TrunkPolicy::none, LossPolicy::materialize},
};

class HostSequenceStep : public ::testing::TestWithParam<StepProblemCase> {};

TEST_P(HostSequenceStep, EveryPolicyTheSameBitsWithinTheRuleOfTheReference) {
  const StepProblemCase c = GetParam();
  DeviceFormatStepProblem p(load_drafter_config(test_config_file(c.config)), c);
  const DrafterStepOptions base = p.options(TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  const StepValues exact = step_values(drafter_step(p.tracker, p.config, p.params, p.frozen, p.batch, base));
  const StepValues plain = plain_bf16_drafter_step(p.config, p.params, p.frozen, p.batch, base);
  ASSERT_GT(exact.valid_rows, 0);

  std::vector<std::vector<std::uint8_t>> hits;
  const StepValues first = host_drafter_step(p.config, p.params, p.frozen, p.batch, base, &hits);
  const std::vector<RuleLine> lines = step_rule_lines(p.params, first, plain, exact);
  for (const RuleLine& l : lines) {
    std::printf("  %-28s error %.2e (plain %.2e, bound %.2e)\n", l.name.c_str(), l.error, l.plain_error, l.bound);
  }
  EXPECT_LE(worst_ratio(lines), 1.0) << describe(lines);
  EXPECT_EQ(first.valid_rows, exact.valid_rows);

  // Hits: only on labelled rows, and as many as the step counts correct.
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(p.config, p.batch, base);
  ASSERT_EQ(hits.size(), seqs.size());
  std::int64_t hit_count = 0;
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    ASSERT_EQ(hits[b].size(), seqs[b].blocks.valid.size());
    for (std::size_t i = 0; i < hits[b].size(); ++i) {
      EXPECT_TRUE(hits[b][i] == 0 || (hits[b][i] == 1 && seqs[b].blocks.valid[i] == 1))
          << "sequence " << b << " row " << i;
      hit_count += hits[b][i];
    }
  }
  EXPECT_EQ(hit_count, first.correct);

  // The forward alone (evaluation) gives the step's statistics and hits, bits and all, whatever loss
  // policy it is asked for, and touches no gradient (host_drafter_forward checks).
  for (const LossPolicy loss : {LossPolicy::chunk_recompute, LossPolicy::materialize}) {
    std::vector<std::vector<std::uint8_t>> forward_hits;
    const LossHeadStats<double> f = host_drafter_forward(p.config, p.params, p.frozen, p.batch,
                                                         p.options(TrunkPolicy::every_k, loss), &forward_hits);
    EXPECT_EQ(std::vector<double>({f.loss, f.ce, f.kl}), first.losses) << loss_policy_name(loss);
    EXPECT_EQ(f.correct, first.correct);
    EXPECT_EQ(f.valid_rows, first.valid_rows);
    EXPECT_EQ(forward_hits, hits);
  }

  for (const PolicyPair& policy : kPolicies) {
    SCOPED_TRACE(str(trunk_policy_name(policy.trunk), " x ", loss_policy_name(policy.loss)));
    const StepValues other =
        host_drafter_step(p.config, p.params, p.frozen, p.batch, p.options(policy.trunk, policy.loss));
    const std::vector<double> a = flattened(other), b = flattened(first);
    ASSERT_EQ(a.size(), b.size());
    const auto differ = std::mismatch(a.begin(), a.end(), b.begin());
    EXPECT_TRUE(differ.first == a.end()) << "the policies disagree in their bits: value " << (differ.first - a.begin())
                                         << " of " << a.size() << " is " << *differ.first << " vs " << *differ.second;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyAndMid, HostSequenceStep,
                         ::testing::Values(StepProblemCase{"tiny.json", 11, 4, 5, 0.0},
                                           StepProblemCase{"tiny.json", 11, 4, 5, 0.1},
                                           StepProblemCase{"mid.json", 300, 4, 24, 0.1},
                                           StepProblemCase{"mid.json", 300, 2, 7, 0.1}),
                         [](const ::testing::TestParamInfo<StepProblemCase>& info) {
                           return str(info.param.config[0] == 't' ? "tiny" : "mid", "_A", info.param.max_anchors,
                                      info.param.dropout > 0 ? "_dropout" : "");
                         });

// Explicit anchors (a golden file's, checked with --impl cuda) fewer than the config's max_anchors:
// the step is sized by the batch's anchor slots (3 here, under max_anchors 4), not the config's.
TEST(HostSequenceStepAnchors, ExplicitAnchorsFewerThanTheConfigsSlotsSizeTheStep) {
  const StepProblemCase c{"tiny.json", 11, 4, 5, 0.1};
  DeviceFormatStepProblem p(load_drafter_config(test_config_file(c.config)), c);
  const DrafterStepOptions o = p.options(TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  const std::vector<PreparedSequence<double>> sampled = prepare_sequences(p.config, p.batch, o);
  constexpr std::int64_t N = 3;
  ASSERT_LT(N, p.config.max_anchors);
  const std::int64_t n_seq = p.batch.num_sequences();
  p.batch.anchors = Tensor<std::int64_t>(p.tracker, MemoryCategory::inputs, {n_seq, N});
  p.batch.keep = Tensor<std::uint8_t>(p.tracker, MemoryCategory::inputs, {n_seq, N});
  for (std::int64_t b = 0; b < n_seq; ++b) {
    for (std::int64_t a = 0; a < N; ++a) {  // the first N of the sampled slots: valid anchors
      p.batch.anchors->row(b)[a] = sampled[std::size_t(b)].slots.anchors[std::size_t(a)];
      p.batch.keep->row(b)[a] = 1;
    }
  }
  const StepValues exact = step_values(drafter_step(p.tracker, p.config, p.params, p.frozen, p.batch, o));
  const StepValues plain = plain_bf16_drafter_step(p.config, p.params, p.frozen, p.batch, o);
  ASSERT_GT(exact.valid_rows, 0);
  const StepValues got = host_drafter_step(p.config, p.params, p.frozen, p.batch, o);
  const std::vector<RuleLine> lines = step_rule_lines(p.params, got, plain, exact);
  EXPECT_LE(worst_ratio(lines), 1.0) << describe(lines);
  EXPECT_EQ(got.valid_rows, exact.valid_rows);
}

// The upload's teacher rows (UploadStaging::teacher_rows: each row of G rounded once, then gathered)
// are the bits of the reference's gather rounded row by row (bf16_bits_of(gather_teacher_rows)),
// for every sequence of the batch through one staging, as the step's loop uses it (so a row a
// sequence leaves unlabelled is zero again after another sequence labelled it), and on 3 threads.
// A NaN in a row no label reads (sequence 1's unlabelled rows) reaches neither.
TEST(HostSequenceStepUpload, TeacherRowsAreTheGatheredRowsRoundedToBf16) {
  const StepProblemCase c{"mid.json", 300, 4, 24, 0.1};
  DeviceFormatStepProblem p(load_drafter_config(test_config_file(c.config)), c);
  const DrafterStepOptions o = p.options(TrunkPolicy::per_layer, LossPolicy::chunk_recompute);
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(p.config, p.batch, o);
  ASSERT_GE(seqs.size(), 2u);
  const std::int64_t S = p.batch.context_length(), H = p.config.hidden_size;
  std::vector<bool> read(std::size_t(S), false);
  for (std::size_t i = 0; i < seqs[1].blocks.valid.size(); ++i) {
    if (seqs[1].blocks.valid[i] != 0) read[std::size_t(seqs[1].blocks.teacher_rows[i])] = true;
  }
  const auto unread = std::find(read.begin(), read.end(), false);
  ASSERT_NE(unread, read.end()) << "every row of G is read: the NaN would have nowhere to hide";
  p.batch.teacher_hidden.row(1)[(unread - read.begin()) * H] = std::numeric_limits<double>::quiet_NaN();
  bool labelled_then_not = false;  // a block row labelled in sequence 0 and not in sequence 1
  for (std::size_t i = 0; i < seqs[0].blocks.valid.size(); ++i) {
    labelled_then_not |= seqs[0].blocks.valid[i] == 1 && seqs[1].blocks.valid[i] == 0;
  }
  ASSERT_TRUE(labelled_then_not) << "the case does not test the reused buffer's zeroing";
  MemoryTracker host;
  UploadStaging one_thread(host), three_threads(host);
  const std::int64_t SKH = S * p.batch.target_features.dim(2);
  for (std::int64_t b = 0; b < p.batch.num_sequences(); ++b) {
    const PreparedSequence<double>& s = seqs[std::size_t(b)];
    const Tensor<double> gathered = gather_teacher_rows(host, p.batch, b, s.blocks);
    const std::vector<Bf16Bits> want = bf16_bits_of(gathered.data(), gathered.numel());
    const std::vector<Bf16Bits> got = one_thread.teacher_rows(p.batch, b, s.blocks);
    EXPECT_TRUE(got == want) << "sequence " << b;
    const double* f = p.batch.target_features.data() + b * SKH;
    EXPECT_TRUE(one_thread.features(f, SKH) == bf16_bits_of(f, SKH)) << "sequence " << b;
    set_reference_threads(3);
    const std::vector<Bf16Bits> split = three_threads.teacher_rows(p.batch, b, s.blocks);
    const std::vector<Bf16Bits> split_features = three_threads.features(f, SKH);
    set_reference_threads(1);
    EXPECT_TRUE(split == want) << "sequence " << b << " on 3 threads";
    EXPECT_TRUE(split_features == bf16_bits_of(f, SKH)) << "sequence " << b << " on 3 threads";
  }
  // What a staging counts: the bytes its step's last sequence uses (F, G and the gathered rows, bf16),
  // not the capacity it took over from an earlier step; nothing once it is gone.
  MemoryTracker staged;
  {
    UploadStaging staging(staged);
    const std::int64_t b = p.batch.num_sequences() - 1;
    staging.features(p.batch.target_features.data() + b * SKH, SKH);
    staging.teacher_rows(p.batch, b, seqs[std::size_t(b)].blocks);
    const auto T = std::int64_t(seqs[std::size_t(b)].blocks.valid.size());
    EXPECT_EQ(staged.current(MemoryCategory::inputs), std::size_t(SKH + S * H + T * H) * sizeof(Bf16Bits));
  }
  EXPECT_EQ(staged.current(MemoryCategory::inputs), 0u);
}

// Production precision, one GPU, ZeRO-0 (the step holds no optimizer state): exact in every
// category but transient, which lies between the plan and the plan plus the loss head's small
// records (at most 3 x 64 B); this backend has no cuBLAS workspaces. The case's rows are partly
// unlabelled: the plan holds whatever their number.
TEST(HostSequenceStepMemory, PeaksPerCategoryAsPlanned) {
  const StepProblemCase c{"mid.json", 300, 2, 7, 0.1};
  DeviceFormatStepProblem p(load_drafter_config(test_config_file(c.config)), c);
  const PolicyPair runs[] = {{TrunkPolicy::none, LossPolicy::chunk_recompute},
                             {TrunkPolicy::per_layer, LossPolicy::chunk_recompute},
                             {TrunkPolicy::every_k, LossPolicy::chunk_recompute},
                             {TrunkPolicy::per_layer, LossPolicy::chunk_grad_in_forward},
                             {TrunkPolicy::per_layer, LossPolicy::materialize}};
  for (const PolicyPair& policy : runs) {
    SCOPED_TRACE(str(trunk_policy_name(policy.trunk), " x ", loss_policy_name(policy.loss)));
    const DrafterStepOptions o = p.options(policy.trunk, policy.loss);
    MemoryTracker memory;
    host_drafter_step(p.config, p.params, p.frozen, p.batch, o, nullptr, &memory);
    expect_peaks_as_planned(memory, step_plan(p.config, p.batch, o), 3 * 64);
  }
}

}  // namespace
}  // namespace dflash
