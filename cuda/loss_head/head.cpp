#include "cuda/loss_head/head.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/bf16.hpp"
#include "io/errors.hpp"

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
    throw_input_error("loss_policy",
                      "'chunk_retain' is not offered on CUDA (it keeps every chunk's logits: the "
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
    throw_input_error(str("valid[", i, "]"),
                      str(int(download_element(allocator_, in.rows.valid, i)), " is not 0 or 1"));
  }
  if (r.bad_weight < none(T)) {
    const auto i = static_cast<std::int64_t>(r.bad_weight);
    throw_input_error(str("weights[", i, "]"),
                      str(download_element(allocator_, in.rows.weights, i), " must be finite and >= 0"));
  }
  if (r.weight_on_invalid < none(T)) {
    const auto i = static_cast<std::int64_t>(r.weight_on_invalid);
    throw_input_error(str("weights[", i, "]"), str(download_element(allocator_, in.rows.weights, i),
                                                   " is non-zero on a row with valid = 0 (w01 = 0 forces w = 0)"));
  }
  if (r.label_out_of_range < none(T)) {
    const auto i = static_cast<std::int64_t>(r.label_out_of_range);
    throw_input_error(str("labels[", i, "]"),
                      str(download_element(allocator_, in.rows.labels, i), " is outside [0, V = ", V, ")"));
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

namespace {

// One chunk's [c', H] fp32 buffer: first its gathered Y rows and G rows (bf16, one half each), then,
// once z and t are made from them, the chunk's dL/dY (fp32): two bf16 rows fill one fp32 row.
static_assert(2 * sizeof(Bf16Bits) == sizeof(float));
Bf16Bits* gathered_student_rows(DeviceBuffer<float>& rows) { return reinterpret_cast<Bf16Bits*>(rows.data()); }
Bf16Bits* gathered_teacher_rows(DeviceBuffer<float>& rows) {
  return reinterpret_cast<Bf16Bits*>(rows.data()) + rows.size();
}

}  // namespace

std::int64_t CudaLossHead::list_valid_rows(const std::uint8_t* valid, std::int64_t T, std::int32_t* list) {
  DeviceBuffer<std::int32_t> count(allocator_, MemoryCategory::transient, 1);
  launch_compact_valid_rows(valid, T, list, count.data(), allocator_.stream());
  return count.download()[0];
}

void CudaLossHead::chunk_logits(const Bf16Bits* hidden, const CudaLossHeadTargets& in, const std::int32_t* list,
                                std::int64_t rows, const CudaLossHeadShape& shape, DeviceBuffer<float>& rows_buffer,
                                Bf16Bits* z, Bf16Bits* t) {
  const std::int64_t H = shape.hidden, V = shape.vocab;
  Bf16Bits* y = gathered_student_rows(rows_buffer);
  Bf16Bits* g = gathered_teacher_rows(rows_buffer);
  launch_gather_rows(hidden, list, rows, H, y, allocator_.stream());
  launch_gather_rows(in.teacher_hidden, list, rows, H, g, allocator_.stream());
  gemm_.logits(y, in.lm_head, z, rows, V, H);
  gemm_.logits(g, in.lm_head, t, rows, V, H);
}

void CudaLossHead::chunk_hidden_grad(const Bf16Bits* dz, const CudaLossHeadTargets& in, const std::int32_t* list,
                                     std::int64_t rows, const CudaLossHeadShape& shape,
                                     DeviceBuffer<float>& rows_buffer, float* hidden_grad) {
  gemm_.input_grad(dz, in.lm_head, rows_buffer.data(), rows, shape.vocab, shape.hidden);
  launch_scatter_rows(rows_buffer.data(), list, rows, shape.hidden, hidden_grad, allocator_.stream());
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
                        {},
                        {}};
  f.lse.zero();  // the invalid rows' outputs: the kernels visit valid rows only
  f.token_loss.zero();
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
  correct.zero();  // the invalid rows' flags (f.hits): the kernels visit valid rows only
  if (grad_in_forward) {
    saved.hidden_grad.emplace(allocator_, MemoryCategory::loss_saved, Tu * std::size_t(H));
    saved.hidden_grad->zero();  // the invalid rows' dL/dY; the valid rows' are scattered in
  }

  // The valid rows, listed once (kept for backward by the policies that recompute there): every
  // product below runs on them only.
  DeviceBuffer<std::int32_t> list(allocator_, grad_in_forward ? MemoryCategory::transient : MemoryCategory::loss_saved,
                                  Tu);
  const std::int64_t n = list_valid_rows(in.rows.valid, T, list.data());

  // materialize keeps every row's logits (one chunk of all rows); the others reuse one chunk.
  const std::size_t chunk_rows = static_cast<std::size_t>(std::min(C, T));
  const std::size_t chunk_elems = chunk_rows * std::size_t(V);
  const MemoryCategory chunk_category = materialize ? MemoryCategory::loss_saved : MemoryCategory::transient;
  DeviceBuffer<Bf16Bits> z(allocator_, chunk_category, chunk_elems);
  DeviceBuffer<Bf16Bits> t(allocator_, chunk_category, chunk_elems);
  DeviceBuffer<float> rows_buffer(allocator_, MemoryCategory::transient, chunk_rows * std::size_t(H));

  const DeviceRowOutputs out{row_stats.data(), f.lse.data(), f.token_loss.data(), ce.data(), kl.data(), correct.data()};
  for (std::int64_t c0 = 0; c0 < n; c0 += C) {
    const std::int64_t rows = std::min(C, n - c0);
    const std::int32_t* chunk_list = list.data() + c0;
    chunk_logits(hidden, in, chunk_list, rows, shape, rows_buffer, z.data(), t.data());
    launch_hybrid_row_stats(z.data(), t.data(), rows, V, chunk_list, in.rows, hw, out, stream);
    if (grad_in_forward) {
      launch_hybrid_logit_grad(z.data(), t.data(), rows, V, chunk_list, in.rows, hw, row_stats.data(),
                               static_cast<float>(weight_sum), stream);
      chunk_hidden_grad(z.data(), in, chunk_list, rows, shape, rows_buffer, saved.hidden_grad->data());
    }
  }

  DeviceBuffer<LossHeadStats<double>> totals(allocator_, MemoryCategory::transient, 1);
  launch_loss_totals(out, in.rows, T, totals.data(), stream);
  f.stats = totals.download()[0];
  f.stats.finish(weight_sum);
  f.hits = correct.download();
  if (!grad_in_forward) {
    saved.row_stats.emplace(std::move(row_stats));
    saved.valid_list.emplace(std::move(list));
    saved.valid_rows = n;
  }
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
  const CudaLossHeadShape& shape = saved.shape;
  const std::int64_t T = shape.rows, H = shape.hidden, V = shape.vocab, C = saved.chunk_rows, n = saved.valid_rows;
  const HybridWeights hw = hybrid_weights();
  const cudaStream_t stream = allocator_.stream();
  const float weight_sum = static_cast<float>(saved.weight_sum);
  DeviceBuffer<float> hidden_grad(allocator_, MemoryCategory::gradients, static_cast<std::size_t>(T * H));
  hidden_grad.zero();  // the invalid rows' dL/dY; the valid rows' are scattered in
  const std::size_t chunk_rows = static_cast<std::size_t>(std::min(C, T));
  DeviceBuffer<float> rows_buffer(allocator_, MemoryCategory::transient, chunk_rows * std::size_t(H));
  const std::int32_t* list = saved.valid_list->data();

  if (saved.policy == LossPolicy::materialize) {
    if (n > 0) {
      launch_hybrid_logit_grad(saved.logits->data(), saved.teacher_logits->data(), n, V, list, in.rows, hw,
                               saved.row_stats->data(), weight_sum, stream);
      chunk_hidden_grad(saved.logits->data(), in, list, n, shape, rows_buffer, hidden_grad.data());
    }
    return hidden_grad;
  }

  const std::size_t chunk_elems = chunk_rows * std::size_t(V);
  DeviceBuffer<Bf16Bits> z(allocator_, MemoryCategory::transient, chunk_elems);
  DeviceBuffer<Bf16Bits> t(allocator_, MemoryCategory::transient, chunk_elems);
  for (std::int64_t c0 = 0; c0 < n; c0 += C) {
    const std::int64_t rows = std::min(C, n - c0);
    const std::int32_t* chunk_list = list + c0;
    chunk_logits(saved.hidden->data(), in, chunk_list, rows, shape, rows_buffer, z.data(), t.data());
    launch_hybrid_logit_grad(z.data(), t.data(), rows, V, chunk_list, in.rows, hw, saved.row_stats->data(), weight_sum,
                             stream);
    chunk_hidden_grad(z.data(), in, chunk_list, rows, shape, rows_buffer, hidden_grad.data());
  }
  return hidden_grad;
}

}  // namespace dflash
