// The block statistics from the step's own loss head (StepMetrics::sequence_hits) against those of
// a separate forward of the same sequences from the parameters the step started from, with the
// same options (anchors, dropout coordinates) and an argmax of z = Y W_lm^T computed row by row
// here (separate_forward_statistics), independent of the loss head: the tiny drafter with dropout on, four steps of three sequences.
// The reference's loss head takes its argmax over the same double logits, so the two are equal bit
// for bit, not within a tolerance.
#include <gtest/gtest.h>

#include "distributed/metrics/block_statistics.hpp"
#include "distributed/single_process_communicator.hpp"
#include "tests/distributed/training_problem.hpp"

namespace dflash::testing {
namespace {

// The blocks of a forward's sequences from an argmax of z = Y W_lm^T computed here, row by row
// (lowest index on ties), rather than the loss head's own hits.
void separate_forward_statistics(BlockStatistics& into, const DrafterConfig& config,
                                 const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch,
                                 const DrafterOutputs<double>& out, const DrafterStepOptions& options) {
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, batch, options);
  const std::int64_t H = config.hidden_size, V = config.vocab_size, T = out.hidden.dim(1);
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    const SequenceBlocks<double>& blocks = seqs[b].blocks;
    std::vector<std::int64_t> argmax(std::size_t(T), -1);
    for (std::int64_t i = 0; i < T; ++i) {
      if (blocks.valid[std::size_t(i)] == 0) continue;
      const double* y = out.hidden.data() + (std::int64_t(b) * T + i) * H;
      double best_z = 0;
      for (std::int64_t v = 0; v < V; ++v) {
        double z = 0;
        for (std::int64_t h = 0; h < H; ++h) z += y[h] * frozen.lm_head[v * H + h];
        if (v == 0 || z > best_z) {
          argmax[std::size_t(i)] = v;
          best_z = z;
        }
      }
    }
    add_block_rows(into, config.block_size, seqs[b].slots.keep, blocks.valid, blocks.labels, argmax);
  }
}

TEST(StepBlockStatistics, EqualsASeparateForwardBitwise) {
  SingleProcessCommunicator comm;
  const TrainingConfig training = tiny_training_config(3, 1, 0);
  TinyTrainer trainer(comm, training);
  const DrafterConfig& config = trainer.config;
  BlockStatistics from_step_total(config.block_size);
  for (std::int64_t t = 0; t < training.total_steps; ++t) {
    const std::vector<SequenceData> data = load_sequences(trainer.tracker, config, t, {0, 1, 2}, all_labelled);
    BlockStatistics separate(config.block_size), from_outputs(config.block_size);
    for (const SequenceData& d : data) {
      MemoryTracker scratch;
      const DrafterStepOptions options = drafter_step_options(config, std::uint32_t(t), std::uint32_t(d.g));
      const DrafterOutputs<double> out =
          drafter_forward(scratch, config, trainer.state.params, trainer.frozen, d.batch, options);
      separate_forward_statistics(separate, config, trainer.frozen, d.batch, out, options);
      add_block_statistics(from_outputs, config.block_size, out);  // the forward's own hits (evaluation)
    }
    const StepMetrics m =
        train_step(trainer.tracker, comm, config, training, trainer.frozen, trainer.state, as_rank_sequences(data));
    ASSERT_EQ(m.sequence_hits.size(), data.size());
    BlockStatistics from_step(config.block_size);
    for (const SequenceHits& h : m.sequence_hits) {
      add_block_hits(from_step, config.block_size, h.keep, h.labelled, h.hits);
      add_block_hits(from_step_total, config.block_size, h.keep, h.labelled, h.hits);
    }
    EXPECT_EQ(from_step.packed(), separate.packed()) << "step " << t;
    EXPECT_EQ(from_outputs.packed(), separate.packed()) << "a forward's own hits, step " << t;
  }
  // The comparison means something: rows were labelled, some hit and some missed, blocks were kept.
  double correct = 0, labelled = 0;
  for (std::size_t k = 1; k < from_step_total.correct.size(); ++k) {
    correct += from_step_total.correct[k];
    labelled += from_step_total.labelled[k];
  }
  EXPECT_GT(correct, 0);
  EXPECT_LT(correct, labelled);
  EXPECT_GT(from_step_total.kept_blocks, 0);
}

}  // namespace
}  // namespace dflash::testing
