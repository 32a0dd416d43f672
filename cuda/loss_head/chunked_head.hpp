// The production loss head (SPEC §5, §7) on a backend: bf16 inputs, products with fp32
// accumulation, fp32 row statistics, never a [T, V] tensor except under `materialize`. The GPU runs
// it on CudaLossHeadBackend (cuda/loss_head/device_backend.hpp: the row kernels, cuBLAS), the CPU
// tests on HostLossHeadBackend (harness/cuda/host_loss_head_backend.hpp: the same block programs
// over the kernels' grids, plain fp32 sums): one chunk loop, so that what it lists, gathers,
// scatters, zeroes, keeps and frees is tested in every CI run (tests/cuda/loss_head/test_loss_head_cpu.cpp).
//
// Only the valid rows (valid_i = 1; SPEC §4: the others carry no label, no teacher and no weight)
// are computed: forward lists them once (row_gather_program.hpp), and each chunk is up to c of
// them, its Y and G rows gathered into a [c, H] buffer. Per chunk: student logits z = Y_c W^T and
// teacher logits t = G_c W^T (bf16, [c, V] each), one statistics pass over both (row_program.hpp),
// and when the gradient is wanted one pass turning z into dL/dz in place, then dL/dY_c = dz W
// (fp32), scattered back to the chunk's rows. Invalid rows' outputs and dL/dY are exact zeros.
// GEMM passes per forward + backward, each over the n valid rows: chunk_grad_in_forward 3 (z, t,
// dY), chunk_recompute 5 (z, t; z, t, dY again in backward), materialize 3.
//
// What each policy holds does not depend on n: planner/loss_head_memory.hpp, cuda_loss_head_memory,
// lists it byte for byte per category (tests/cuda/loss_head/test_loss_head_cpu.cpp on the CPU
// backend, tests/cuda/drafter/test_cuda_memory_plan_gpu.cpp on the device); besides it only the
// backend's own (the cuBLAS workspace) and a few bytes of input checks, the valid-row count and
// totals. Y, G, W_lm and the per-row targets are the caller's.
//
// A Backend provides, besides Buffer<T> and buffer<T>(category, n) (cuda/trunk/layer.hpp):
//   from_host(category, values), to_host(buffer), element(array, i)   one value back to the host
//   copy(to, from, bytes)                                              within the backend's memory
//   compact_valid_rows, gather_rows, scatter_rows, hybrid_row_stats, hybrid_logit_grad,
//   loss_totals, find_row_target_faults, find_non_finite_bf16         as row_kernels.hpp's launchers
//   logits(x, w, z, rows, V, H), logits_input_grad(dz, w, dx, rows, V, H)   as CublasGemm's
// Every call is in stream order: a read back (to_host, element) sees all the work before it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/bf16.hpp"
#include "cuda/loss_head/row_program.hpp"
#include "cuda/runtime/bf16_bits.hpp"
#include "io/errors.hpp"
#include "reference/loss_head_types.hpp"
#include "reference/memory_tracker.hpp"

namespace dflash {

struct CudaLossHeadShape {
  std::int64_t rows = 0;    // T
  std::int64_t hidden = 0;  // H
  std::int64_t vocab = 0;   // V
};

// Everything the loss head reads besides Y, in the backend's memory. All of it must outlive backward.
// Rows with valid = 0 carry no label and no teacher: their label and teacher row are never read.
struct CudaLossHeadTargets {
  const Bf16Bits* teacher_hidden = nullptr;  // [T,H], row i = G[a_n + k - 1]
  const Bf16Bits* lm_head = nullptr;         // W_lm [V,H], for the student and the teacher
  DeviceRowTargets rows;                     // labels [T], weights [T] (fp32), valid [T]
};

// The host-side checks every entry point runs first (no backend needed): options (the reference's
// rules), the policies this path implements (not chunk_retain, the memory trap; no dL/dW_lm: the
// head is frozen), shape and W. Throws InputError naming the argument and the value.
inline void validate_cuda_loss_head(const LossHeadOptions& options, const CudaLossHeadShape& shape, double weight_sum) {
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

// `options` once validate_cuda_loss_head has accepted them: how a loss head takes its options,
// before it touches any memory.
inline LossHeadOptions validated_cuda_loss_head_options(const LossHeadOptions& options) {
  validate_cuda_loss_head(options, CudaLossHeadShape{0, 1, 1}, 0.0);
  return options;
}

// What forward keeps for backward; which members are set depends on the policy.
template <class Backend>
struct ChunkedLossHeadSaved {
  template <class T>
  using Buffer = typename Backend::template Buffer<T>;
  LossPolicy policy = LossPolicy::chunk_recompute;
  CudaLossHeadShape shape;
  std::int64_t chunk_rows = 1;
  double weight_sum = 0;
  std::optional<Buffer<Bf16Bits>> hidden;          // chunk_recompute: a copy of Y [T,H]
  std::optional<Buffer<Bf16Bits>> logits;          // materialize: z [T,V]
  std::optional<Buffer<Bf16Bits>> teacher_logits;  // materialize: t [T,V]
  std::optional<Buffer<float>> row_stats;          // [T,3] lse(z), lse(z/tau), lse(t/tau)
  std::optional<Buffer<float>> hidden_grad;        // chunk_grad_in_forward: dL/dY [T,H]
  std::optional<Buffer<std::int32_t>> valid_list;  // chunk_recompute, materialize: the valid rows [T]
  std::int64_t valid_rows = 0;                     // ... their number n (list[0, n))
};

template <class Backend>
struct ChunkedLossHeadForward {
  LossHeadStats<double> stats;                          // loss, ce, kl already divided by W; correct, valid_rows
  typename Backend::template Buffer<float> lse;         // [T] logsumexp(z) where valid, else 0
  typename Backend::template Buffer<float> token_loss;  // [T] l_i where valid, else 0
  ChunkedLossHeadSaved<Backend> saved;
  // [T] 1 where valid and argmax z = y (the row kernel's own flag, lowest index on ties), else 0:
  // for the block statistics (TRAINING §17). Read back with the totals: T bytes on the host.
  std::vector<std::uint8_t> hits;
};

template <class Backend>
class ChunkedLossHead {
 public:
  template <class T>
  using Buffer = typename Backend::template Buffer<T>;
  using Forward = ChunkedLossHeadForward<Backend>;
  using Saved = ChunkedLossHeadSaved<Backend>;

  // Bad options are rejected before the backend is touched.
  ChunkedLossHead(const Backend& backend, const LossHeadOptions& options)
      : options_(validated_cuda_loss_head_options(options)), be_(backend) {}

  // `hidden` is Y [T,H] (bf16); W is the GLOBAL weight sum (SPEC §5), computed before the loss head
  // so that ranks can share it. Checks the per-row targets and the finiteness of Y, G (valid rows)
  // and W_lm in the backend's memory; bad input throws InputError naming the element. Y is not read
  // after this returns, and all of forward's work has finished (it reads the totals back).
  Forward forward(const Bf16Bits* hidden, const CudaLossHeadShape& shape, const CudaLossHeadTargets& in,
                  double weight_sum) {
    check_inputs(hidden, shape, in, weight_sum);
    const std::int64_t T = shape.rows, H = shape.hidden, V = shape.vocab;
    const std::int64_t C = effective_chunk_rows(options_, T);
    const auto Tu = static_cast<std::size_t>(T);
    const LossPolicy policy = options_.policy;
    const bool materialize = policy == LossPolicy::materialize;
    const bool grad_in_forward = policy == LossPolicy::chunk_grad_in_forward;
    const HybridWeights hw = hybrid_weights();

    Forward f{{},
              be_.template buffer<float>(MemoryCategory::outputs, Tu),
              be_.template buffer<float>(MemoryCategory::outputs, Tu),
              {},
              {}};
    f.lse.zero();  // the invalid rows' outputs: the kernels visit valid rows only
    f.token_loss.zero();
    Saved& saved = f.saved;
    saved.policy = policy;
    saved.shape = shape;
    saved.chunk_rows = C;
    saved.weight_sum = weight_sum;
    if (policy == LossPolicy::chunk_recompute) {
      saved.hidden.emplace(be_.template buffer<Bf16Bits>(MemoryCategory::loss_saved, Tu * std::size_t(H)));
      be_.copy(saved.hidden->data(), hidden, saved.hidden->size() * sizeof(Bf16Bits));
    }
    Buffer<float> row_stats = be_.template buffer<float>(
        grad_in_forward ? MemoryCategory::transient : MemoryCategory::loss_saved, kSavedRowStats * Tu);
    Buffer<float> ce = be_.template buffer<float>(MemoryCategory::transient, Tu);
    Buffer<float> kl = be_.template buffer<float>(MemoryCategory::transient, Tu);
    Buffer<std::uint8_t> correct = be_.template buffer<std::uint8_t>(MemoryCategory::transient, Tu);
    correct.zero();  // the invalid rows' flags (f.hits): the kernels visit valid rows only
    if (grad_in_forward) {
      saved.hidden_grad.emplace(be_.template buffer<float>(MemoryCategory::loss_saved, Tu * std::size_t(H)));
      saved.hidden_grad->zero();  // the invalid rows' dL/dY; the valid rows' are scattered in
    }

    // The valid rows, listed once (kept for backward by the policies that recompute there): every
    // product below runs on them only.
    Buffer<std::int32_t> list =
        be_.template buffer<std::int32_t>(grad_in_forward ? MemoryCategory::transient : MemoryCategory::loss_saved, Tu);
    const std::int64_t n = list_valid_rows(in.rows.valid, T, list.data());

    // materialize keeps every row's logits (one chunk of all rows); the others reuse one chunk.
    const std::size_t chunk_rows = static_cast<std::size_t>(std::min(C, T));
    const std::size_t chunk_elems = chunk_rows * std::size_t(V);
    const MemoryCategory chunk_category = materialize ? MemoryCategory::loss_saved : MemoryCategory::transient;
    Buffer<Bf16Bits> z = be_.template buffer<Bf16Bits>(chunk_category, chunk_elems);
    Buffer<Bf16Bits> t = be_.template buffer<Bf16Bits>(chunk_category, chunk_elems);
    Buffer<float> rows_buffer = be_.template buffer<float>(MemoryCategory::transient, chunk_rows * std::size_t(H));

    const DeviceRowOutputs out{row_stats.data(), f.lse.data(), f.token_loss.data(),
                               ce.data(),        kl.data(),    correct.data()};
    for (std::int64_t c0 = 0; c0 < n; c0 += C) {
      const std::int64_t rows = std::min(C, n - c0);
      const std::int32_t* chunk_list = list.data() + c0;
      chunk_logits(hidden, in, chunk_list, rows, shape, rows_buffer, z.data(), t.data());
      be_.hybrid_row_stats(z.data(), t.data(), rows, V, chunk_list, in.rows, hw, out);
      if (grad_in_forward) {
        be_.hybrid_logit_grad(z.data(), t.data(), rows, V, chunk_list, in.rows, hw, row_stats.data(),
                              static_cast<float>(weight_sum));
        chunk_hidden_grad(z.data(), in, chunk_list, rows, shape, rows_buffer, saved.hidden_grad->data());
      }
    }

    Buffer<LossHeadStats<double>> totals = be_.template buffer<LossHeadStats<double>>(MemoryCategory::transient, 1);
    be_.loss_totals(out, in.rows, T, totals.data());
    f.stats = be_.to_host(totals)[0];
    f.stats.finish(weight_sum);
    f.hits = be_.to_host(correct);
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

  // dL/dY [T,H] in fp32 (MemoryCategory::gradients). Consumes what forward saved; nothing of it
  // outlives this call. `in` must be the targets forward saw.
  //
  // Stream contract (the device backend): backward only enqueues its work and returns before that
  // work has run. Until it has, G, W_lm and the per-row targets are still being read and the
  // returned dL/dY is still being written: use dL/dY by later work on the same stream (stream
  // order makes that safe), and before the caller frees or overwrites any of `in` from the host or
  // another stream, wait for the stream.
  Buffer<float> backward(const CudaLossHeadTargets& in, Saved saved) {
    if (saved.policy != options_.policy) {
      throw_input_error("loss_policy", str("backward called with '", loss_policy_name(options_.policy),
                                           "' on the saved state of '", loss_policy_name(saved.policy), "'"));
    }
    if (saved.policy == LossPolicy::chunk_grad_in_forward) {
      Buffer<float> g = std::move(*saved.hidden_grad);
      g.recategorize(MemoryCategory::gradients);
      return g;
    }
    const CudaLossHeadShape& shape = saved.shape;
    const std::int64_t T = shape.rows, H = shape.hidden, V = shape.vocab, C = saved.chunk_rows, n = saved.valid_rows;
    const HybridWeights hw = hybrid_weights();
    const float weight_sum = static_cast<float>(saved.weight_sum);
    Buffer<float> hidden_grad = be_.template buffer<float>(MemoryCategory::gradients, static_cast<std::size_t>(T * H));
    hidden_grad.zero();  // the invalid rows' dL/dY; the valid rows' are scattered in
    const std::size_t chunk_rows = static_cast<std::size_t>(std::min(C, T));
    Buffer<float> rows_buffer = be_.template buffer<float>(MemoryCategory::transient, chunk_rows * std::size_t(H));
    const std::int32_t* list = saved.valid_list->data();

    if (saved.policy == LossPolicy::materialize) {
      if (n > 0) {
        be_.hybrid_logit_grad(saved.logits->data(), saved.teacher_logits->data(), n, V, list, in.rows, hw,
                              saved.row_stats->data(), weight_sum);
        chunk_hidden_grad(saved.logits->data(), in, list, n, shape, rows_buffer, hidden_grad.data());
      }
      return hidden_grad;
    }

    const std::size_t chunk_elems = chunk_rows * std::size_t(V);
    Buffer<Bf16Bits> z = be_.template buffer<Bf16Bits>(MemoryCategory::transient, chunk_elems);
    Buffer<Bf16Bits> t = be_.template buffer<Bf16Bits>(MemoryCategory::transient, chunk_elems);
    for (std::int64_t c0 = 0; c0 < n; c0 += C) {
      const std::int64_t rows = std::min(C, n - c0);
      const std::int32_t* chunk_list = list + c0;
      chunk_logits(saved.hidden->data(), in, chunk_list, rows, shape, rows_buffer, z.data(), t.data());
      be_.hybrid_logit_grad(z.data(), t.data(), rows, V, chunk_list, in.rows, hw, saved.row_stats->data(), weight_sum);
      chunk_hidden_grad(z.data(), in, chunk_list, rows, shape, rows_buffer, hidden_grad.data());
    }
    return hidden_grad;
  }

  const LossHeadOptions& options() const { return options_; }
  const Backend& backend() const { return be_; }

 private:
  HybridWeights hybrid_weights() const {
    return hybrid_hyper<float>(options_);  // in float range: validate_cuda_loss_head
  }

  [[noreturn]] void throw_non_finite(const char* name, const Bf16Bits* x, unsigned long long element,
                                     std::int64_t cols) const {
    const float value = float_from_bf16_bits(be_.element(x, static_cast<std::int64_t>(element)));
    throw_input_error(name, str("element ", element, " (row ", element / static_cast<unsigned long long>(cols), ") is ",
                                value, "; every value must be finite"));
  }

  // Everything forward checks in the backend, found in one pass and read back in one copy.
  struct InputFaults {
    RowTargetFaults rows;
    unsigned long long hidden;          // first non-finite element of Y, or T H
    unsigned long long teacher_hidden;  // ... of G on a valid row, or T H
    unsigned long long lm_head;         // ... of W_lm, or V H
  };

  void check_inputs(const Bf16Bits* hidden, const CudaLossHeadShape& shape, const CudaLossHeadTargets& in,
                    double weight_sum) const {
    validate_cuda_loss_head(options_, shape, weight_sum);
    const std::int64_t T = shape.rows, H = shape.hidden, V = shape.vocab;
    if (T > 0 && hidden == nullptr) throw_input_error("hidden", "missing (null device pointer)");
    if (T > 0 && in.teacher_hidden == nullptr) throw_input_error("teacher_hidden", "missing (null device pointer)");
    if (in.lm_head == nullptr) throw_input_error("lm_head", "missing (null device pointer)");
    if (T > 0 && (in.rows.labels == nullptr || in.rows.weights == nullptr || in.rows.valid == nullptr)) {
      throw_input_error("labels/weights/valid", "missing (null device pointer)");
    }

    const auto none = [](std::int64_t n) { return static_cast<unsigned long long>(n); };
    const InputFaults clean{{none(T), none(T), none(T), none(T), none(T)}, none(T * H), none(T * H), none(V * H)};
    Buffer<InputFaults> faults = be_.from_host(MemoryCategory::transient, std::vector<InputFaults>{clean});
    InputFaults* f = faults.data();
    be_.find_row_target_faults(in.rows, T, V, &f->rows);
    be_.find_non_finite_bf16(hidden, T, H, nullptr, &f->hidden);
    be_.find_non_finite_bf16(in.teacher_hidden, T, H, in.rows.valid, &f->teacher_hidden);
    be_.find_non_finite_bf16(in.lm_head, V, H, nullptr, &f->lm_head);
    const InputFaults found = be_.to_host(faults)[0];

    const RowTargetFaults& r = found.rows;
    if (r.valid_not_01 < none(T)) {
      const auto i = static_cast<std::int64_t>(r.valid_not_01);
      throw_input_error(str("valid[", i, "]"), str(int(be_.element(in.rows.valid, i)), " is not 0 or 1"));
    }
    if (r.bad_weight < none(T)) {
      const auto i = static_cast<std::int64_t>(r.bad_weight);
      throw_input_error(str("weights[", i, "]"), str(be_.element(in.rows.weights, i), " must be finite and >= 0"));
    }
    if (r.weight_on_invalid < none(T)) {
      const auto i = static_cast<std::int64_t>(r.weight_on_invalid);
      throw_input_error(str("weights[", i, "]"), str(be_.element(in.rows.weights, i),
                                                     " is non-zero on a row with valid = 0 (w01 = 0 forces w = 0)"));
    }
    if (r.label_out_of_range < none(T)) {
      const auto i = static_cast<std::int64_t>(r.label_out_of_range);
      throw_input_error(str("labels[", i, "]"), str(be_.element(in.rows.labels, i), " is outside [0, V = ", V, ")"));
    }
    if (r.positive_weight < none(T) && !(weight_sum > 0)) {
      throw_input_error("weight_sum", str(weight_sum, " is zero while some row weights are positive"));
    }
    if (found.hidden < none(T * H)) throw_non_finite("hidden", hidden, found.hidden, H);
    if (found.lm_head < none(V * H)) throw_non_finite("lm_head", in.lm_head, found.lm_head, H);
    if (found.teacher_hidden < none(T * H))
      throw_non_finite("teacher_hidden", in.teacher_hidden, found.teacher_hidden, H);
  }

  // Lists the valid rows in list[0, n) and returns n (one 4-byte read back).
  std::int64_t list_valid_rows(const std::uint8_t* valid, std::int64_t T, std::int32_t* list) const {
    Buffer<std::int32_t> count = be_.template buffer<std::int32_t>(MemoryCategory::transient, 1);
    be_.compact_valid_rows(valid, T, list, count.data());
    return be_.to_host(count)[0];
  }

  // One chunk's [c', H] fp32 buffer: first its gathered Y rows and G rows (bf16, one half each),
  // then, once z and t are made from them, the chunk's dL/dY (fp32): two bf16 rows fill one fp32 row.
  static_assert(2 * sizeof(Bf16Bits) == sizeof(float));
  static Bf16Bits* gathered_student_rows(Buffer<float>& rows) { return reinterpret_cast<Bf16Bits*>(rows.data()); }
  static Bf16Bits* gathered_teacher_rows(Buffer<float>& rows) {
    return reinterpret_cast<Bf16Bits*>(rows.data()) + rows.size();
  }

  // A chunk of rows list[0, rows): gathers their Y and G rows into rows_buffer, then z, t = those W^T.
  void chunk_logits(const Bf16Bits* hidden, const CudaLossHeadTargets& in, const std::int32_t* list, std::int64_t rows,
                    const CudaLossHeadShape& shape, Buffer<float>& rows_buffer, Bf16Bits* z, Bf16Bits* t) const {
    const std::int64_t H = shape.hidden, V = shape.vocab;
    Bf16Bits* y = gathered_student_rows(rows_buffer);
    Bf16Bits* g = gathered_teacher_rows(rows_buffer);
    be_.gather_rows(hidden, list, rows, H, y);
    be_.gather_rows(in.teacher_hidden, list, rows, H, g);
    be_.logits(y, in.lm_head, z, rows, V, H);
    be_.logits(g, in.lm_head, t, rows, V, H);
  }

  // dL/dY of those rows = dz W into rows_buffer, scattered to rows list[r] of hidden_grad.
  void chunk_hidden_grad(const Bf16Bits* dz, const CudaLossHeadTargets& in, const std::int32_t* list, std::int64_t rows,
                         const CudaLossHeadShape& shape, Buffer<float>& rows_buffer, float* hidden_grad) const {
    be_.logits_input_grad(dz, in.lm_head, rows_buffer.data(), rows, shape.vocab, shape.hidden);
    be_.scatter_rows(rows_buffer.data(), list, rows, shape.hidden, hidden_grad);
  }

  LossHeadOptions options_;
  Backend be_;
};

}  // namespace dflash
