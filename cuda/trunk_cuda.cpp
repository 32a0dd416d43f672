#include "cuda/trunk_cuda.hpp"

#include <algorithm>
#include <utility>

#include "cuda/trunk_elementwise_kernels.hpp"
#include "reference/errors.hpp"

namespace dflash {
namespace {

std::size_t count(std::int64_t a, std::int64_t b = 1) { return static_cast<std::size_t>(a * b); }

}  // namespace

CudaTrunk::CudaTrunk(DeviceAllocator& allocator, LinearGemm& gemm, const CudaTrunkWeights& weights,
                     CudaLayerContext ctx, std::int64_t K, const Bf16Bits* features, const std::int64_t* tokens,
                     TrunkPolicy policy, std::int64_t checkpoint_every)
    : allocator_(allocator),
      gemm_(gemm),
      w_(weights),
      ctx_(ctx),
      K_(K),
      features_(features),
      tokens_(tokens),
      policy_(policy),
      segment_(trunk_segment_length(policy, checkpoint_every, ctx.dims.L)),
      inputs_(static_cast<std::size_t>(ctx.dims.L)),
      layers_(static_cast<std::size_t>(ctx.dims.L)) {
  const auto L = static_cast<std::size_t>(ctx.dims.L);
  if (weights.layers.size() != L || weights.sliding.size() != L) {
    throw_input_error("trunk weights", str(weights.layers.size(), " layers and ", weights.sliding.size(),
                                           " layer types for num_hidden_layers ", ctx.dims.L));
  }
}

DeviceBuffer<Bf16Bits> CudaTrunk::forward() {
  const DrafterDims& m = ctx_.dims;
  const cudaStream_t stream = allocator_.stream();
  const MemoryCategory saved = MemoryCategory::saved;

  // C = RMSNorm(F W_fc^T), once for all layers.
  fc_out_ = DeviceBuffer<float>(allocator_, saved, count(m.S, m.H));
  hidden_rstd_ = DeviceBuffer<float>(allocator_, saved, count(m.S));
  context_ = DeviceBuffer<Bf16Bits>(allocator_, saved, count(m.S, m.H));
  gemm_.forward(features_, w_.fc, fc_out_.data(), m.S, m.H, K_ * m.H);
  launch_rms_norm_forward(fc_out_.data(), w_.hidden_norm, m.S, m.H, ctx_.eps, context_.data(), hidden_rstd_.data(),
                          stream);
  ctx_.context = context_.data();

  DeviceBuffer<float> current(allocator_, MemoryCategory::transient, count(m.T, m.H));
  launch_embedding_gather(tokens_, w_.embed_tokens, m.T, m.H, current.data(), stream);
  for (std::int64_t l = 0; l < m.L; ++l) {
    const float* x = current.data();
    if (is_boundary(l)) {
      current.recategorize(saved);
      inputs_[l] = std::move(current);
      x = inputs_[l].data();
    }
    const bool keep = policy_ == TrunkPolicy::none;
    CudaLayerActivations acts(allocator_, m, keep ? saved : MemoryCategory::transient);
    current = cuda_layer_forward(allocator_, gemm_, ctx_, l, w_.sliding[l], w_.layers[l], x, acts);
    if (keep) layers_[l].emplace(std::move(acts));
  }

  DeviceBuffer<Bf16Bits> y(allocator_, MemoryCategory::transient, count(m.T, m.H));
  final_rstd_ = DeviceBuffer<float>(allocator_, saved, count(m.T));
  launch_rms_norm_forward(current.data(), w_.norm, m.T, m.H, ctx_.eps, y.data(), final_rstd_.data(), stream);
  current.recategorize(saved);
  final_input_ = std::move(current);
  return y;
}

void CudaTrunk::recompute_segment(std::int64_t start, std::int64_t end) {
  for (std::int64_t l = start; l < end; ++l) {
    layers_[l].emplace(allocator_, ctx_.dims, MemoryCategory::saved);
    DeviceBuffer<float> out =
        cuda_layer_forward(allocator_, gemm_, ctx_, l, w_.sliding[l], w_.layers[l], inputs_[l].data(), *layers_[l]);
    if (l + 1 < end) {
      out.recategorize(MemoryCategory::saved);
      inputs_[l + 1] = std::move(out);
    }
  }
}

void CudaTrunk::backward(DeviceBuffer<float> d_hidden, const CudaTrunkGrads& grads) {
  const DrafterDims& m = ctx_.dims;
  const cudaStream_t stream = allocator_.stream();
  DeviceBuffer<float> d_x(allocator_, MemoryCategory::transient, count(m.T, m.H));
  d_x.zero();
  launch_rms_norm_backward(final_input_.data(), w_.norm, final_rstd_.data(), d_hidden.data(), m.T, m.H, d_x.data(),
                           stream);
  launch_rms_norm_weight_grad(final_input_.data(), final_rstd_.data(), d_hidden.data(), m.T, m.H, grads.norm, stream);
  d_hidden.release();
  final_input_.release();
  final_rstd_.release();

  DeviceBuffer<float> d_context(allocator_, MemoryCategory::transient, count(m.S, m.H));
  d_context.zero();
  for (std::int64_t start = (m.L - 1) / segment_ * segment_; start >= 0; start -= segment_) {
    const std::int64_t end = std::min(start + segment_, m.L);
    if (policy_ != TrunkPolicy::none) recompute_segment(start, end);
    for (std::int64_t l = end - 1; l >= start; --l) {
      d_x = cuda_layer_backward(allocator_, gemm_, ctx_, l, w_.sliding[l], w_.layers[l], inputs_[l].data(),
                                *layers_[l], std::move(d_x), grads.layers[l], d_context.data());
      layers_[l].reset();
      inputs_[l].release();
    }
  }
  d_x.release();

  // C = RMSNorm(F W_fc^T): dL/d(fc output), then W_fc's gradient (and F's, when wanted).
  DeviceBuffer<float> d_fc_out(allocator_, MemoryCategory::transient, count(m.S, m.H));
  d_fc_out.zero();
  launch_rms_norm_backward(fc_out_.data(), w_.hidden_norm, hidden_rstd_.data(), d_context.data(), m.S, m.H,
                           d_fc_out.data(), stream);
  launch_rms_norm_weight_grad(fc_out_.data(), hidden_rstd_.data(), d_context.data(), m.S, m.H, grads.hidden_norm,
                              stream);
  d_context.release();
  DeviceBuffer<Bf16Bits> d_fc16(allocator_, MemoryCategory::transient, d_fc_out.size());
  launch_narrow(d_fc_out.data(), static_cast<std::int64_t>(d_fc_out.size()), d_fc16.data(), stream);
  gemm_.weight_grad(d_fc16.data(), features_, grads.fc, m.S, m.H, K_ * m.H);
  if (grads.target_features != nullptr) {
    gemm_.input_grad(d_fc16.data(), w_.fc, grads.target_features, m.S, m.H, K_ * m.H, true);
  }
  fc_out_.release();
  hidden_rstd_.release();
  context_.release();
}

}  // namespace dflash
