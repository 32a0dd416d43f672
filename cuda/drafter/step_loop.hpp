// The drafter step's host side over a backend: the uploads (parameters, frozen weights, each
// sequence's inputs) and the loop of cuda_drafter_sequence_step over the batch's sequences. The
// GPU runs it on CudaBackend and CudaLossHead (cuda/drafter/step.cpp: cuda_drafter_step,
// cuda_drafter_sequences); the CPU tests on HostBackend<Bf16Bits> and the loss head's chunk loop on
// HostLossHeadBackend (harness/cuda/drafter_step_twin.hpp, host_drafter_step), so that every line
// between the reference's inputs and the device's results runs in CI.
//
// A backend here is the trunk's (cuda/trunk/layer.hpp), which also makes, fills and reads buffers:
// buffer<T>(category, n), from_host(category, values), to_host(buffer).
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda/drafter/sequence_step.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "reference/drafter.hpp"

namespace dflash {

struct CudaDrafterStepResult {
  LossHeadStats<double> stats;          // loss, ce, kl over W; correct, valid_rows
  double weight_sum = 0;                // W
  DrafterParameters<double> grads;      // host copies, MemoryCategory::gradients of the host tracker
  Tensor<double> target_features_grad;  // dL/dF [nseq, S, K H]
};

// x[0, n) rounded to bf16 (through float, nearest even) in a new buffer of category c.
template <class Backend>
typename Backend::template Buffer<Bf16Bits> upload_bf16_to(const Backend& be, MemoryCategory c, const double* x,
                                                           std::int64_t n) {
  return be.from_host(c, bf16_bits_of(x, n));
}

// Every trainable parameter in DrafterParameters::for_each order: matrices in bf16 (GEMM
// operands), vectors (norm weights) in fp32; and one fp32 gradient buffer each, zeroed.
template <class Backend>
struct StepParameters {
  template <class T>
  using Buffer = typename Backend::template Buffer<T>;
  std::vector<Buffer<Bf16Bits>> matrices;
  std::vector<Buffer<float>> vectors;
  std::vector<Buffer<float>> grads;
  std::vector<const void*> values;  // per parameter, in order
  std::vector<float*> grad_of;      // per parameter, in order

  StepParameters(const Backend& be, const DrafterParameters<double>& p) {
    p.for_each([&](const std::string&, const Tensor<double>& t) {
      if (t.rank() == 2) {
        matrices.push_back(upload_bf16_to(be, MemoryCategory::parameters, t.data(), t.numel()));
        values.push_back(matrices.back().data());
      } else {
        vectors.push_back(be.from_host(MemoryCategory::parameters, std::vector<float>(t.data(), t.data() + t.numel())));
        values.push_back(vectors.back().data());
      }
      grads.push_back(be.template buffer<float>(MemoryCategory::gradients, static_cast<std::size_t>(t.numel())));
      grads.back().zero();
      grad_of.push_back(grads.back().data());
    });
  }
};

// The trainable parameters (StepParameters) and the frozen E and W_lm (bf16) in the backend's
// memory, bound per parameter (bind_trunk_parameters) as the sequence step reads them.
template <class Backend>
struct StepWeights {
  StepParameters<Backend> parameters;
  typename Backend::template Buffer<Bf16Bits> embed, lm_head;
  CudaDrafterWeights weights;

  StepWeights(const Backend& be, const DrafterConfig& config, const DrafterParameters<double>& params,
              const FrozenWeights<double>& frozen)
      : parameters(be, params),
        embed(upload_bf16_to(be, MemoryCategory::frozen, frozen.embed_tokens.data(), frozen.embed_tokens.numel())),
        lm_head(upload_bf16_to(be, MemoryCategory::frozen, frozen.lm_head.data(), frozen.lm_head.numel())) {
    weights.lm_head = lm_head.data();
    bind_trunk_parameters(config, parameters.values, parameters.grad_of, embed.data(), weights.trunk, weights.grads);
  }
};

// The host's staging of a sequence's bf16 uploads, kept from one sequence to the next and, through a
// process-wide cache, from one step to the next (a fresh half gigabyte a sequence at full scale costs
// more in page faults and zeroing than the rounding that fills it: reference/storage_pool.hpp tells
// the same story for the reference's tensors). `host` counts the bytes this step's sequences use
// (the largest sequence's, while the step lives); the capacity cached between steps belongs to no
// tracker, as the storage pool's blocks do, and stays with the process (0.34 GB at full scale, the
// gathered teacher rows: a run's F comes in bf16 and is uploaded from its tensor).
//  - features(x, n): x[0, n) rounded as upload_bf16_to rounds (bf16_bits_into);
//  - teacher_rows(batch, b, blocks): sequence b's teacher rows as the loss head reads them,
//    gather_teacher_rows's rows (G[a_n + k - 1] where w01 = 1, else 0) rounded to bf16, so the same
//    bits as bf16_bits_of(gather_teacher_rows(...)); each row of G is rounded once and then copied
//    to the block rows that read it (32768 block rows read 4096 rows of G at full scale: a gather of
//    doubles would be 1.3 GB a sequence, 8 times G).
class UploadStaging {
 public:
  explicit UploadStaging(MemoryTracker& host) : host_(host) {
    const std::lock_guard<std::mutex> lock(cache_mutex());
    buffers_ = std::move(cache());
    cache() = {};
  }
  UploadStaging(const UploadStaging&) = delete;
  UploadStaging& operator=(const UploadStaging&) = delete;
  ~UploadStaging() {
    host_.release(MemoryCategory::inputs, counted_);
    const std::lock_guard<std::mutex> lock(cache_mutex());
    cache() = std::move(buffers_);
  }

  // A sequence's F [S, K H] from its doubles, rounded. (Bits rounded before, Bf16Features, are
  // uploaded from where they are: SequenceUpload.)
  const std::vector<Bf16Bits>& features(const double* x, std::int64_t n) {
    bf16_bits_into(x, n, buffers_.features);
    in_use_[0] = buffers_.features.size();
    recount();
    return buffers_.features;
  }
  // The teacher rows G[a_n + k - 1] of a sequence's blocks, gathered: from its G [S, H] in double,
  // rounded here, or from bits rounded before.
  const std::vector<Bf16Bits>& teacher_rows(const DrafterBatch<double>& batch, std::int64_t b,
                                            const SequenceBlocks<double>& blocks) {
    const std::int64_t S = batch.context_length(), H = batch.teacher_hidden.dim(2);
    bf16_bits_into(batch.teacher_hidden.data() + b * S * H, S * H, buffers_.g);
    in_use_[1] = buffers_.g.size();
    return gathered_teacher_rows(buffers_.g.data(), H, blocks);
  }
  const std::vector<Bf16Bits>& teacher_rows(const Bf16Bits* g, std::int64_t H, const SequenceBlocks<double>& blocks) {
    in_use_[1] = 0;
    return gathered_teacher_rows(g, H, blocks);
  }

 private:
  const std::vector<Bf16Bits>& gathered_teacher_rows(const Bf16Bits* g, std::int64_t H,
                                                     const SequenceBlocks<double>& blocks) {
    std::vector<Bf16Bits>& rows = buffers_.rows;
    const auto T = static_cast<std::int64_t>(blocks.valid.size());
    rows.resize(static_cast<std::size_t>(T * H));
    run_row_ranges(T, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        const auto to = rows.begin() + i * H;
        if (blocks.valid[static_cast<std::size_t>(i)] == 0) {
          std::fill(to, to + H, Bf16Bits(0));  // bf16 zeros, as a gathered 0 rounds; the buffer is reused
          continue;
        }
        const Bf16Bits* from = g + blocks.teacher_rows[static_cast<std::size_t>(i)] * H;
        std::copy(from, from + H, to);
      }
    });
    in_use_[2] = rows.size();
    recount();
    return rows;
  }

  struct Buffers {
    std::vector<Bf16Bits> features, g, rows;  // F, G rounded, the gathered teacher rows
  };
  static std::mutex& cache_mutex() {
    static std::mutex m;
    return m;
  }
  static Buffers& cache() {
    static Buffers b;
    return b;
  }
  void recount() {
    const std::size_t bytes = (in_use_[0] + in_use_[1] + in_use_[2]) * sizeof(Bf16Bits);
    if (bytes > counted_) host_.allocate(MemoryCategory::inputs, bytes - counted_);
    if (bytes < counted_) host_.release(MemoryCategory::inputs, counted_ - bytes);
    counted_ = bytes;
  }
  MemoryTracker& host_;
  Buffers buffers_;
  std::size_t in_use_[3] = {0, 0, 0};  // elements of features, g, rows this step's last call wrote
  std::size_t counted_ = 0;
};

// One sequence's inputs (SPEC §2, §4) in the backend's memory: anchor slots and block rows as
// prepare_sequences made them, F rounded to bf16, the teacher rows G[a_n + k - 1] rounded to bf16
// and gathered (both through `staging`; from `bf16`, F and G rounded before, when given: F uploaded
// from its tensor, the gathered rows through the staging), labels,
// fp32 weights, w01; dL/dF zeroed when wanted.
template <class Backend>
struct SequenceUpload {
  template <class T>
  using Buffer = typename Backend::template Buffer<T>;
  Buffer<std::int64_t> anchors;
  Buffer<std::uint8_t> keep;
  Buffer<std::int64_t> positions, tokens;
  Buffer<Bf16Bits> features, teacher_rows;
  Buffer<std::int64_t> labels;
  Buffer<float> weights;
  Buffer<std::uint8_t> valid;
  Buffer<float> features_grad;  // empty when not wanted

  SequenceUpload(const Backend& be, UploadStaging& staging, const DrafterBatch<double>& batch, std::int64_t b,
                 const PreparedSequence<double>& s, bool want_features_grad, const Bf16Features* bf16) {
    const MemoryCategory in = MemoryCategory::inputs;
    const std::int64_t S = batch.context_length();
    const std::int64_t SKH = S * (bf16 ? bf16->target_features.dim(2) : batch.target_features.dim(2));
    anchors = be.from_host(in, s.slots.anchors);
    keep = be.from_host(in, s.slots.keep);
    positions = be.from_host(in, s.blocks.positions);
    tokens = be.from_host(in, s.blocks.input_tokens);
    if (bf16 != nullptr) {
      const std::int64_t H = bf16->teacher_hidden.dim(2);
      // the bits as they are, no staging copy (250 MB a sequence at full scale)
      features = be.from_host(
          in, std::span<const Bf16Bits>(bf16->target_features.data() + b * SKH, static_cast<std::size_t>(SKH)));
      teacher_rows = be.from_host(in, staging.teacher_rows(bf16->teacher_hidden.data() + b * S * H, H, s.blocks));
    } else {
      features = be.from_host(in, staging.features(batch.target_features.data() + b * SKH, SKH));
      teacher_rows = be.from_host(in, staging.teacher_rows(batch, b, s.blocks));
    }
    labels = be.from_host(in, s.blocks.labels);
    weights = be.from_host(in, std::vector<float>(s.blocks.weights.begin(), s.blocks.weights.end()));
    valid = be.from_host(in, s.blocks.valid);
    if (want_features_grad) {
      features_grad = be.template buffer<float>(MemoryCategory::gradients, static_cast<std::size_t>(SKH));
      features_grad.zero();
    }
  }

  CudaSequenceInputs view(const std::int64_t* context_positions) {
    return {anchors.data(),
            keep.data(),
            positions.data(),
            context_positions,
            tokens.data(),
            features.data(),
            teacher_rows.data(),
            DeviceRowTargets{labels.data(), weights.data(), valid.data()},
            features_grad.size() > 0 ? features_grad.data() : nullptr};
  }
};

// The loop over the batch's sequences (prepared with `options`, the batch validated by the caller):
// each sequence's inputs uploaded, then cuda_drafter_sequence_step over `weight_sum` (backward) or
// cuda_drafter_sequence_forward (not), in sequence order; dL/dF written into *features_grad
// ([nseq, S, K H], host) when it is given. F and G are `bf16`'s when given (the batch's own then
// empty), else the batch's. Returns the statistics summed over the sequences.
template <class Backend, class Head>
LossHeadStats<double> drafter_sequences_on(const Backend& be, Head& head, MemoryTracker& host,
                                           const DrafterConfig& config, const CudaDrafterWeights& weights,
                                           const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                           const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                           bool backward, Tensor<double>* features_grad,
                                           std::vector<std::vector<std::uint8_t>>* hits,
                                           const Bf16Features* bf16 = nullptr) {
  const std::int64_t nseq = batch.num_sequences(), S = batch.context_length();
  const DrafterDims dims = DrafterDims::of(config, S, batch.anchor_slots(config));
  const std::int64_t KH = dims.feature_width();
  std::vector<std::int64_t> context_positions(static_cast<std::size_t>(S));
  std::iota(context_positions.begin(), context_positions.end(), std::int64_t(0));
  const auto ctx_pos = be.from_host(MemoryCategory::inputs, context_positions);

  LossHeadStats<double> total;
  UploadStaging staging(host);
  for (std::int64_t b = 0; b < nseq; ++b) {
    SequenceUpload<Backend> seq(be, staging, batch, b, seqs[static_cast<std::size_t>(b)], features_grad != nullptr,
                                bf16);
    const CudaSequenceInputs inputs = seq.view(ctx_pos.data());
    const std::uint32_t sequence = options.sequence_offset + static_cast<std::uint32_t>(b);
    std::vector<std::uint8_t>* sequence_hits = hits != nullptr ? &hits->emplace_back() : nullptr;
    total.merge(backward ? cuda_drafter_sequence_step(be, head, config, dims, weights, inputs, options, sequence,
                                                      weight_sum, sequence_hits)
                         : cuda_drafter_sequence_forward(be, head, config, dims, weights, inputs, options, sequence,
                                                         weight_sum, sequence_hits));
    if (features_grad != nullptr) {
      const std::vector<float> df = be.to_host(seq.features_grad);
      std::copy(df.begin(), df.end(), features_grad->data() + b * S * KH);
    }
  }
  return total;
}

// What the step knows before it touches a backend: everything the reference validates (config,
// parameters, batch, policies, the teacher rows the anchors reach; InputError naming the problem),
// the loss head's options, the sequences as prepare_sequences makes them and W (the global weight
// sum when given, else the batch's).
struct CheckedDrafterStep {
  LossHeadOptions loss_options;
  std::vector<PreparedSequence<double>> seqs;
  double weight_sum = 0;
};
inline CheckedDrafterStep check_drafter_step(const DrafterConfig& config, const DrafterParameters<double>& params,
                                             const FrozenWeights<double>& frozen, const DrafterBatch<double>& batch,
                                             const DrafterStepOptions& options,
                                             const std::optional<double>& global_weight_sum = std::nullopt) {
  CheckedDrafterStep c;
  c.loss_options = validate_drafter_step(config, params, frozen, batch, options);
  c.seqs = prepare_sequences(config, batch, options);
  drafter_detail::validate_teacher_rows(batch, c.seqs);
  c.weight_sum = global_weight_sum ? *global_weight_sum : drafter_detail::total_weight(c.seqs);
  return c;
}

// The step after check_drafter_step (before `be` and `head` took any memory): parameters and frozen
// weights uploaded, the loop with dL/dF, every gradient read back into the result.
template <class Backend, class Head>
CudaDrafterStepResult drafter_step_on(const Backend& be, Head& head, MemoryTracker& host, const DrafterConfig& config,
                                      const DrafterParameters<double>& params, const FrozenWeights<double>& frozen,
                                      const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                      const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                      std::vector<std::vector<std::uint8_t>>* hits = nullptr) {
  CudaDrafterStepResult result;
  result.weight_sum = weight_sum;
  result.grads = make_drafter_parameters<double>(host, config, MemoryCategory::gradients);
  result.target_features_grad = Tensor<double>(host, MemoryCategory::gradients, batch.target_features.shape());

  const StepWeights<Backend> device(be, config, params, frozen);
  result.stats = drafter_sequences_on(be, head, host, config, device.weights, batch, options, seqs, result.weight_sum,
                                      true, &result.target_features_grad, hits);

  std::size_t at = 0;
  result.grads.for_each([&](const std::string&, Tensor<double>& t) {
    const std::vector<float> g = be.to_host(device.parameters.grads[at++]);
    std::copy(g.begin(), g.end(), t.data());
  });
  return result;
}

}  // namespace dflash
