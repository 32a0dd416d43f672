#include "cuda/drafter/step.hpp"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "common/bf16.hpp"
#include "cuda/drafter/sequence_step.hpp"
#include "cuda/gemm/linear.hpp"
#include "cuda/loss_head/head.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/trunk/device_backend.hpp"

namespace dflash {
namespace {

template <class T>
DeviceBuffer<T> upload(DeviceAllocator& a, MemoryCategory c, const std::vector<T>& host) {
  DeviceBuffer<T> b(a, c, host.size());
  b.upload(host);
  return b;
}

DeviceBuffer<float> upload_f32(DeviceAllocator& a, MemoryCategory c, const double* x, std::int64_t n) {
  return upload(a, c, std::vector<float>(x, x + n));
}

// Every trainable parameter on the device, in DrafterParameters::for_each order: matrices in
// bf16 (GEMM operands), vectors (norm weights) in fp32; and one fp32 gradient buffer each.
struct DeviceParameters {
  std::vector<DeviceBuffer<Bf16Bits>> matrices;
  std::vector<DeviceBuffer<float>> vectors;
  std::vector<DeviceBuffer<float>> grads;
  std::vector<const void*> values;  // per parameter, in order
  std::vector<float*> grad_of;      // per parameter, in order

  DeviceParameters(DeviceAllocator& a, const DrafterParameters<double>& p) {
    p.for_each([&](const std::string&, const Tensor<double>& t) {
      if (t.rank() == 2) {
        matrices.push_back(upload_bf16(a, MemoryCategory::parameters, t.data(), t.numel()));
        values.push_back(matrices.back().data());
      } else {
        vectors.push_back(upload_f32(a, MemoryCategory::parameters, t.data(), t.numel()));
        values.push_back(vectors.back().data());
      }
      grads.emplace_back(a, MemoryCategory::gradients, static_cast<std::size_t>(t.numel()));
      grads.back().zero();
      grad_of.push_back(grads.back().data());
    });
  }
};

// The loop of cuda_drafter_sequences (backward: forward and backward of each sequence) and of
// cuda_drafter_forward_sequences (forward only): the same uploads, sequence by sequence.
LossHeadStats<double> run_sequences(DeviceAllocator& allocator, MemoryTracker& host, const DrafterConfig& config,
                                    const CudaDrafterWeights& weights, const DrafterBatch<double>& batch,
                                    const DrafterStepOptions& options, const LossHeadOptions& loss_options,
                                    const std::vector<PreparedSequence<double>>& seqs, double weight_sum, bool backward,
                                    Tensor<double>* features_grad, std::vector<std::vector<std::uint8_t>>* hits);

}  // namespace

DeviceBuffer<Bf16Bits> upload_bf16(DeviceAllocator& a, MemoryCategory c, const double* x, std::int64_t n) {
  std::vector<Bf16Bits> host(static_cast<std::size_t>(n));
  for (std::size_t e = 0; e < host.size(); ++e) host[e] = bf16_bits_from_float(static_cast<float>(x[e]));
  return upload(a, c, host);
}

LossHeadStats<double> cuda_drafter_sequences(DeviceAllocator& allocator, MemoryTracker& host,
                                             const DrafterConfig& config, const CudaDrafterWeights& weights,
                                             const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                             const LossHeadOptions& loss_options,
                                             const std::vector<PreparedSequence<double>>& seqs, double weight_sum,
                                             Tensor<double>* features_grad,
                                             std::vector<std::vector<std::uint8_t>>* hits) {
  return run_sequences(allocator, host, config, weights, batch, options, loss_options, seqs, weight_sum, true,
                       features_grad, hits);
}

LossHeadStats<double> cuda_drafter_forward_sequences(DeviceAllocator& allocator, MemoryTracker& host,
                                                     const DrafterConfig& config, const CudaDrafterWeights& weights,
                                                     const DrafterBatch<double>& batch,
                                                     const DrafterStepOptions& options,
                                                     const LossHeadOptions& loss_options,
                                                     const std::vector<PreparedSequence<double>>& seqs,
                                                     double weight_sum, std::vector<std::vector<std::uint8_t>>* hits) {
  // chunk_recompute's forward computes the statistics alone: chunk_grad_in_forward's would also make
  // dL/dY, materialize's keep every row's logits.
  LossHeadOptions forward_only = loss_options;
  forward_only.policy = LossPolicy::chunk_recompute;
  return run_sequences(allocator, host, config, weights, batch, options, forward_only, seqs, weight_sum, false, nullptr,
                       hits);
}

namespace {

LossHeadStats<double> run_sequences(DeviceAllocator& allocator, MemoryTracker& host, const DrafterConfig& config,
                                    const CudaDrafterWeights& weights, const DrafterBatch<double>& batch,
                                    const DrafterStepOptions& options, const LossHeadOptions& loss_options,
                                    const std::vector<PreparedSequence<double>>& seqs, double weight_sum, bool backward,
                                    Tensor<double>* features_grad, std::vector<std::vector<std::uint8_t>>* hits) {
  const std::int64_t nseq = batch.num_sequences(), S = batch.context_length();
  const DrafterDims dims = DrafterDims::of(config, S, batch.anchor_slots(config));
  const std::int64_t KH = dims.feature_width();
  LinearGemm gemm(allocator);
  const CudaBackend backend{allocator, gemm};
  CudaLossHead head(allocator, loss_options);
  std::vector<std::int64_t> context_positions(static_cast<std::size_t>(S));
  std::iota(context_positions.begin(), context_positions.end(), std::int64_t(0));
  const MemoryCategory in = MemoryCategory::inputs;
  const DeviceBuffer<std::int64_t> ctx_pos = upload(allocator, in, context_positions);

  LossHeadStats<double> total;
  for (std::int64_t b = 0; b < nseq; ++b) {
    const PreparedSequence<double>& s = seqs[static_cast<std::size_t>(b)];
    const DeviceBuffer<std::int64_t> anchors = upload(allocator, in, s.slots.anchors);
    const DeviceBuffer<std::uint8_t> keep = upload(allocator, in, s.slots.keep);
    const DeviceBuffer<std::int64_t> positions = upload(allocator, in, s.blocks.positions);
    const DeviceBuffer<std::int64_t> tokens = upload(allocator, in, s.blocks.input_tokens);
    const DeviceBuffer<Bf16Bits> features =
        upload_bf16(allocator, in, batch.target_features.data() + b * S * KH, S * KH);
    const Tensor<double> teacher = gather_teacher_rows(host, batch, b, s.blocks);
    const DeviceBuffer<Bf16Bits> teacher16 = upload_bf16(allocator, in, teacher.data(), teacher.numel());
    const DeviceBuffer<std::int64_t> labels = upload(allocator, in, s.blocks.labels);
    const DeviceBuffer<float> row_weights =
        upload(allocator, in, std::vector<float>(s.blocks.weights.begin(), s.blocks.weights.end()));
    const DeviceBuffer<std::uint8_t> valid = upload(allocator, in, s.blocks.valid);

    DeviceBuffer<float> d_features;
    if (features_grad != nullptr) {
      d_features = DeviceBuffer<float>(allocator, MemoryCategory::gradients, static_cast<std::size_t>(S * KH));
      d_features.zero();
    }
    const CudaSequenceInputs inputs{anchors.data(),   keep.data(),
                                    positions.data(), ctx_pos.data(),
                                    tokens.data(),    features.data(),
                                    teacher16.data(), DeviceRowTargets{labels.data(), row_weights.data(), valid.data()},
                                    d_features.data()};
    const std::uint32_t sequence = options.sequence_offset + static_cast<std::uint32_t>(b);
    std::vector<std::uint8_t>* sequence_hits = hits != nullptr ? &hits->emplace_back() : nullptr;
    const LossHeadStats<double> stats =
        backward ? cuda_drafter_sequence_step(backend, head, config, dims, weights, inputs, options, sequence,
                                              weight_sum, sequence_hits)
                 : cuda_drafter_sequence_forward(backend, head, config, dims, weights, inputs, options, sequence,
                                                 weight_sum, sequence_hits);
    total.loss += stats.loss;
    total.ce += stats.ce;
    total.kl += stats.kl;
    total.magnitude = std::max(total.magnitude, stats.magnitude);
    total.correct += stats.correct;
    total.valid_rows += stats.valid_rows;
    if (features_grad != nullptr) {
      const std::vector<float> df = d_features.download();
      std::copy(df.begin(), df.end(), features_grad->data() + b * S * KH);
    }
  }
  return total;
}

}  // namespace

CudaDrafterStepResult cuda_drafter_step(DeviceAllocator& allocator, MemoryTracker& host, const DrafterConfig& config,
                                        const DrafterParameters<double>& params, const FrozenWeights<double>& frozen,
                                        const DrafterBatch<double>& batch, const DrafterStepOptions& options,
                                        const std::optional<double>& global_weight_sum) {
  const LossHeadOptions loss_options = validate_drafter_step(config, params, frozen, batch, options);
  const std::vector<PreparedSequence<double>> seqs = prepare_sequences(config, batch, options);
  drafter_detail::validate_teacher_rows(batch, seqs);

  CudaDrafterStepResult result;
  result.weight_sum = global_weight_sum ? *global_weight_sum : drafter_detail::total_weight(seqs);
  result.grads = make_drafter_parameters<double>(host, config, MemoryCategory::gradients);
  result.target_features_grad = Tensor<double>(host, MemoryCategory::gradients, batch.target_features.shape());

  const DeviceParameters device(allocator, params);
  const DeviceBuffer<Bf16Bits> embed =
      upload_bf16(allocator, MemoryCategory::frozen, frozen.embed_tokens.data(), frozen.embed_tokens.numel());
  const DeviceBuffer<Bf16Bits> lm_head =
      upload_bf16(allocator, MemoryCategory::frozen, frozen.lm_head.data(), frozen.lm_head.numel());
  CudaDrafterWeights weights;
  weights.lm_head = lm_head.data();
  bind_trunk_parameters(config, device.values, device.grad_of, embed.data(), weights.trunk, weights.grads);
  result.stats = cuda_drafter_sequences(allocator, host, config, weights, batch, options, loss_options, seqs,
                                        result.weight_sum, &result.target_features_grad);

  std::size_t at = 0;
  result.grads.for_each([&](const std::string&, Tensor<double>& t) {
    const std::vector<float> g = device.grads[at++].download();
    std::copy(g.begin(), g.end(), t.data());
  });
  return result;
}

}  // namespace dflash
