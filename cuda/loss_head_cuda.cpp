#include "cuda/loss_head_cuda.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/bf16.hpp"
#include "reference/errors.hpp"

namespace dflash {
namespace {

template <class T>
T download_element(const DeviceAllocator& allocator, const T* device_array, std::int64_t index) {
  T value{};
  copy_to_host(allocator, &value, device_array + index, sizeof(T));
  return value;
}

// Everything forward checks on the device, found in one pass and read back in one copy.
struct DeviceInputFaults {
  RowTargetFaults rows;
  unsigned long long hidden;          // first non-finite element of Y, or T H
  unsigned long long teacher_hidden;  // ... of G on a valid row, or T H
  unsigned long long lm_head;         // ... of W_lm, or V H
};

void throw_non_finite(const DeviceAllocator& allocator, const char* name, const Bf16Bits* x, unsigned long long element,
                      std::int64_t cols) {
  const float value = float_from_bf16_bits(download_element(allocator, x, static_cast<std::int64_t>(element)));
  throw_input_error(name, str("element ", element, " (row ", element / static_cast<unsigned long long>(cols), ") is ",
                              value, "; every value must be finite"));
}

}  // namespace

void validate_cuda_loss_head(const LossHeadOptions& options, const CudaLossHeadShape& shape, double weight_sum) {
  validate_loss_head_options(options);
  if (options.policy == LossPolicy::chunk_retain) {
    throw_input_error("loss_policy", "'chunk_retain' is not offered on CUDA (it keeps every chunk's logits: the "
                                     "memory trap); use chunk_recompute or chunk_grad_in_forward");
  }
  if (options.lm_head_grad) {
    throw_input_error("lm_head_grad", "true is not supported on CUDA: lm_head is frozen (SPEC §3)");
  }
  // h, s and tau are narrowed to float for the kernels: each must survive that as the number it was
  // (tau below FLT_MIN would lose its precision or become 0; above FLT_MAX any of them becomes inf),
  // and 1/tau, which the kernels multiply by, must be finite.
  const auto float_range = [](double value, const char* name) {
    if (std::abs(value) > double(std::numeric_limits<float>::max())) {
      throw_input_error(name, str(value, " exceeds the float range the CUDA kernels compute in (max ",
                                  std::numeric_limits<float>::max(), ")"));
    }
  };
  float_range(options.hard_weight, "hard_weight");
  float_range(options.soft_weight, "soft_weight");
  float_range(options.temperature, "temperature");
  if (options.temperature < double(std::numeric_limits<float>::min())) {
    throw_input_error("temperature", str(options.temperature, " is below the smallest normal float (",
                                         std::numeric_limits<float>::min(), "): the CUDA kernels compute in float"));
  }
  if (shape.rows < 0) throw_input_error("rows", str(shape.rows, " must be >= 0"));
  if (shape.hidden < 1) throw_input_error("hidden_size", str(shape.hidden, " must be >= 1"));
  if (shape.vocab < 1) throw_input_error("vocab_size", str(shape.vocab, " must be >= 1"));
  if (!std::isfinite(weight_sum) || weight_sum < 0) {
    throw_input_error("weight_sum", str(weight_sum, " must be finite and >= 0"));
  }
  if (weight_sum > double(std::numeric_limits<float>::max())) {
    throw_input_error("weight_sum", str(weight_sum, " exceeds the float range the CUDA kernels scale by"));
  }
}

namespace {

// Bad options are rejected before any device work (the cuBLAS handle included).
LossHeadOptions validated(const LossHeadOptions& options) {
  validate_cuda_loss_head(options, CudaLossHeadShape{0, 1, 1}, 0.0);
  return options;
}

}  // namespace

CudaLossHead::CudaLossHead(DeviceAllocator& allocator, const LossHeadOptions& options)
    : allocator_(allocator), options_(validated(options)), gemm_(allocator) {}

HybridWeights CudaLossHead::hybrid_weights() const {
  return hybrid_hyper<float>(options_);  // in float range: validate_cuda_loss_head
}

void CudaLossHead::check_inputs(const Bf16Bits* hidden, const CudaLossHeadShape& shape, const CudaLossHeadTargets& in,
                                double weight_sum) {
  validate_cuda_loss_head(options_, shape, weight_sum);
  const std::int64_t T = shape.rows, H = shape.hidden, V = shape.vocab;
  if (T > 0 && hidden == nullptr) throw_input_error("hidden", "missing (null device pointer)");
  if (T > 0 && in.teacher_hidden == nullptr) throw_input_error("teacher_hidden", "missing (null device pointer)");
  if (in.lm_head == nullptr) throw_input_error("lm_head", "missing (null device pointer)");
  if (T > 0 && (in.rows.labels == nullptr || in.rows.weights == nullptr || in.rows.valid == nullptr)) {
    throw_input_error("labels/weights/valid", "missing (null device pointer)");
  }

  const auto none = [](std::int64_t n) { return static_cast<unsigned long long>(n); };
  const DeviceInputFaults clean{{none(T), none(T), none(T), none(T), none(T)}, none(T * H), none(T * H), none(V * H)};
  DeviceBuffer<DeviceInputFaults> faults(allocator_, MemoryCategory::transient, 1);
  faults.upload(std::span(&clean, 1));
  DeviceInputFaults* f = faults.data();
  const cudaStream_t stream = allocator_.stream();
  launch_find_row_target_faults(in.rows, T, V, &f->rows, stream);
  launch_find_non_finite_bf16(hidden, T, H, nullptr, &f->hidden, stream);
  launch_find_non_finite_bf16(in.teacher_hidden, T, H, in.rows.valid, &f->teacher_hidden, stream);
  launch_find_non_finite_bf16(in.lm_head, V, H, nullptr, &f->lm_head, stream);
  const DeviceInputFaults found = faults.download()[0];

  const RowTargetFaults& r = found.rows;
  if (r.valid_not_01 < none(T)) {
    const auto i = static_cast<std::int64_t>(r.valid_not_01);
    throw_input_error(str("valid[", i, "]"), str(int(download_element(allocator_, in.rows.valid, i)), " is not 0 or 1"));
  }
  if (r.bad_weight < none(T)) {
    const auto i = static_cast<std::int64_t>(r.bad_weight);
    throw_input_error(str("weights[", i, "]"), str(download_element(allocator_, in.rows.weights, i),
                                                   " must be finite and >= 0"));
  }
  if (r.weight_on_invalid < none(T)) {
    const auto i = static_cast<std::int64_t>(r.weight_on_invalid);
    throw_input_error(str("weights[", i, "]"), str(download_element(allocator_, in.rows.weights, i),
                                                   " is non-zero on a row with valid = 0 (w01 = 0 forces w = 0)"));
  }
  if (r.label_out_of_range < none(T)) {
    const auto i = static_cast<std::int64_t>(r.label_out_of_range);
    throw_input_error(str("labels[", i, "]"), str(download_element(allocator_, in.rows.labels, i),
                                                  " is outside [0, V = ", V, ")"));
  }
  if (r.positive_weight < none(T) && !(weight_sum > 0)) {
    throw_input_error("weight_sum", str(weight_sum, " is zero while some row weights are positive"));
  }
  if (found.hidden < none(T * H)) throw_non_finite(allocator_, "hidden", hidden, found.hidden, H);
  if (found.lm_head < none(V * H)) throw_non_finite(allocator_, "lm_head", in.lm_head, found.lm_head, H);
  if (found.teacher_hidden < none(T * H)) {
    throw_non_finite(allocator_, "teacher_hidden", in.teacher_hidden, found.teacher_hidden, H);
  }
}

CudaLossHeadForward CudaLossHead::forward(const Bf16Bits* hidden, const CudaLossHeadShape& shape,
                                          const CudaLossHeadTargets& in, double weight_sum) {
  check_inputs(hidden, shape, in, weight_sum);
  const std::int64_t T = shape.rows, H = shape.hidden, V = shape.vocab;
  const std::int64_t C = effective_chunk_rows(options_, T);
  const auto Tu = static_cast<std::size_t>(T);
  const LossPolicy policy = options_.policy;
  const bool materialize = policy == LossPolicy::materialize;
  const bool grad_in_forward = policy == LossPolicy::chunk_grad_in_forward;
  const HybridWeights hw = hybrid_weights();
  const cudaStream_t stream = allocator_.stream();

  CudaLossHeadForward f{{},
                        DeviceBuffer<float>(allocator_, MemoryCategory::outputs, Tu),
                        DeviceBuffer<float>(allocator_, MemoryCategory::outputs, Tu),
                        {}};
  CudaLossHeadSaved& saved = f.saved;
  saved.policy = policy;
  saved.shape = shape;
  saved.chunk_rows = C;
  saved.weight_sum = weight_sum;
  if (policy == LossPolicy::chunk_recompute) {
    saved.hidden.emplace(allocator_, MemoryCategory::loss_saved, Tu * std::size_t(H));
    copy_on_device(allocator_, saved.hidden->data(), hidden, saved.hidden->bytes());
  }
  DeviceBuffer<float> row_stats(allocator_, grad_in_forward ? MemoryCategory::transient : MemoryCategory::loss_saved,
                                kSavedRowStats * Tu);
  DeviceBuffer<float> ce(allocator_, MemoryCategory::transient, Tu);
  DeviceBuffer<float> kl(allocator_, MemoryCategory::transient, Tu);
  DeviceBuffer<std::uint8_t> correct(allocator_, MemoryCategory::transient, Tu);
  if (grad_in_forward) saved.hidden_grad.emplace(allocator_, MemoryCategory::loss_saved, Tu * std::size_t(H));

  // materialize keeps every row's logits (one chunk of all rows); the others reuse one chunk.
  const std::size_t chunk_elems = static_cast<std::size_t>(std::min(C, T)) * std::size_t(V);
  const MemoryCategory chunk_category = materialize ? MemoryCategory::loss_saved : MemoryCategory::transient;
  DeviceBuffer<Bf16Bits> z(allocator_, chunk_category, chunk_elems);
  DeviceBuffer<Bf16Bits> t(allocator_, chunk_category, chunk_elems);

  const DeviceRowOutputs out{row_stats.data(), f.lse.data(), f.token_loss.data(), ce.data(), kl.data(), correct.data()};
  for (std::int64_t r0 = 0; r0 < T; r0 += C) {
    const std::int64_t rows = std::min(C, T - r0);
    gemm_.logits(hidden + r0 * H, in.lm_head, z.data(), rows, V, H);
    gemm_.logits(in.teacher_hidden + r0 * H, in.lm_head, t.data(), rows, V, H);
    launch_hybrid_row_stats(z.data(), t.data(), rows, V, r0, in.rows, hw, out, stream);
    if (grad_in_forward) {
      launch_hybrid_logit_grad(z.data(), t.data(), rows, V, r0, in.rows, hw, row_stats.data(),
                               static_cast<float>(weight_sum), stream);
      gemm_.input_grad(z.data(), in.lm_head, saved.hidden_grad->data() + r0 * H, rows, V, H);
    }
  }

  DeviceBuffer<LossHeadStats<double>> totals(allocator_, MemoryCategory::transient, 1);
  launch_loss_totals(out, in.rows, T, totals.data(), stream);
  f.stats = totals.download()[0];
  f.stats.finish(weight_sum);
  if (!grad_in_forward) saved.row_stats.emplace(std::move(row_stats));
  if (materialize) {
    saved.logits.emplace(std::move(z));
    saved.teacher_logits.emplace(std::move(t));
  }
  return f;
}

DeviceBuffer<float> CudaLossHead::backward(const CudaLossHeadTargets& in, CudaLossHeadSaved saved) {
  if (saved.policy != options_.policy) {
    throw_input_error("loss_policy", str("backward called with '", loss_policy_name(options_.policy),
                                         "' on the saved state of '", loss_policy_name(saved.policy), "'"));
  }
  if (saved.policy == LossPolicy::chunk_grad_in_forward) {
    DeviceBuffer<float> g = std::move(*saved.hidden_grad);
    g.recategorize(MemoryCategory::gradients);
    return g;
  }
  const std::int64_t T = saved.shape.rows, H = saved.shape.hidden, V = saved.shape.vocab, C = saved.chunk_rows;
  const HybridWeights hw = hybrid_weights();
  const cudaStream_t stream = allocator_.stream();
  DeviceBuffer<float> hidden_grad(allocator_, MemoryCategory::gradients, static_cast<std::size_t>(T * H));

  if (saved.policy == LossPolicy::materialize) {
    launch_hybrid_logit_grad(saved.logits->data(), saved.teacher_logits->data(), T, V, 0, in.rows, hw,
                             saved.row_stats->data(), static_cast<float>(saved.weight_sum), stream);
    gemm_.input_grad(saved.logits->data(), in.lm_head, hidden_grad.data(), T, V, H);
    return hidden_grad;
  }

  const std::size_t chunk_elems = static_cast<std::size_t>(std::min(C, T)) * std::size_t(V);
  DeviceBuffer<Bf16Bits> z(allocator_, MemoryCategory::transient, chunk_elems);
  DeviceBuffer<Bf16Bits> t(allocator_, MemoryCategory::transient, chunk_elems);
  for (std::int64_t r0 = 0; r0 < T; r0 += C) {
    const std::int64_t rows = std::min(C, T - r0);
    gemm_.logits(saved.hidden->data() + r0 * H, in.lm_head, z.data(), rows, V, H);
    gemm_.logits(in.teacher_hidden + r0 * H, in.lm_head, t.data(), rows, V, H);
    launch_hybrid_logit_grad(z.data(), t.data(), rows, V, r0, in.rows, hw, saved.row_stats->data(),
                             static_cast<float>(saved.weight_sum), stream);
    gemm_.input_grad(z.data(), in.lm_head, hidden_grad.data() + r0 * H, rows, V, H);
  }
  return hidden_grad;
}

}  // namespace dflash
