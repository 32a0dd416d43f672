#include "cuda/gemm/cublas_call.hpp"

#include <algorithm>
#include <climits>
#include <type_traits>

#include "io/errors.hpp"

namespace dflash {

int cublas_dimension(std::int64_t value, const char* name) {
  if (value < 0 || value > INT_MAX) throw_input_error(name, str(value, " does not fit cuBLAS's int dimensions"));
  return static_cast<int>(value);
}

namespace {

std::int64_t element_bytes(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_32F:
      return 4;
    default:
      throw_input_error("gemm element type", str(int(type), " is not bf16 or fp32"));
  }
}

template <class Pointer>
Pointer advance(Pointer p, cudaDataType_t type, std::int64_t elements) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>, const char*, char*>;
  return elements == 0 ? p : static_cast<Byte>(p) + elements * element_bytes(type);
}

// The slices of [0, extent): as few as keep each at most `most` long (`what` names the operand
// that sets it), near-equal, in order.
std::vector<GemmSlice> near_equal_slices(std::int64_t extent, std::int64_t most, const char* what) {
  if (most < 1) throw_input_error(what, "one column alone spans more elements than one cuBLAS call may");
  const std::int64_t parts = (extent + most - 1) / most, size = (extent + parts - 1) / parts;
  std::vector<GemmSlice> slices;
  for (std::int64_t first = 0; first < extent; first += size) slices.push_back({first, std::min(size, extent - first)});
  return slices;
}

}  // namespace

GemmSlicing gemm_slicing_within_span(const GemmCall& g, std::int64_t max_span) {
  // The longest slice along each dimension that keeps every operand whose columns run along it
  // within max_span: C's columns run along n; A's along k (N) or m (T); B's along n (N) or k (T).
  if (g.m == 0 || g.n == 0 || g.k == 0) return {{{0, g.m}}, {{0, g.n}}, {{0, g.k}}};
  std::int64_t most_m = g.m, most_n = g.n, most_k = g.k;
  const auto limit = [&](std::int64_t& most, std::int64_t ld) {
    if (ld < 1) throw_input_error("gemm leading dimension", str(ld, " is not positive"));
    most = std::min(most, max_span / ld);
  };
  limit(most_n, g.ldc);
  limit(g.transa == CUBLAS_OP_N ? most_k : most_m, g.lda);
  limit(g.transb == CUBLAS_OP_N ? most_n : most_k, g.ldb);
  if (most_k < g.k && g.c_type == CUDA_R_16BF) {
    throw_input_error("gemm k", str(g.k, " would be cut into partial sums each rounded to a bf16 C: ", most_k,
                                    " columns at most per call"));
  }
  return {near_equal_slices(g.m, most_m, "gemm A"), near_equal_slices(g.n, most_n, "gemm B or C"),
          near_equal_slices(g.k, most_k, "gemm A or B")};
}

std::vector<GemmCall> gemm_calls_within_span(const GemmCall& g, std::int64_t max_span) {
  const GemmSlicing slicing = gemm_slicing_within_span(g, max_span);
  const std::vector<GemmSlice>&ms = slicing.m, &ns = slicing.n, &ks = slicing.k;
  if (ms.size() == 1 && ns.size() == 1 && ks.size() == 1) return {g};
  std::vector<GemmCall> calls;
  calls.reserve(ms.size() * ns.size() * ks.size());
  for (const GemmSlice& n : ns) {
    for (const GemmSlice& m : ms) {
      for (const GemmSlice& k : ks) {
        GemmCall c = g;
        c.m = static_cast<int>(m.count);
        c.n = static_cast<int>(n.count);
        c.k = static_cast<int>(k.count);
        // A is m x k (N, column l at l lda) or stored k x m (T, column i at i lda).
        const std::int64_t a_offset = g.transa == CUBLAS_OP_N ? m.first + k.first * g.lda : k.first + m.first * g.lda;
        // B is k x n (N) or stored n x k (T).
        const std::int64_t b_offset = g.transb == CUBLAS_OP_N ? k.first + n.first * g.ldb : n.first + k.first * g.ldb;
        c.a = advance(g.a, g.a_type, a_offset);
        c.b = advance(g.b, g.b_type, b_offset);
        c.c = advance(g.c, g.c_type, m.first + n.first * g.ldc);
        if (k.first > 0) c.beta = 1.0f;
        calls.push_back(c);
      }
    }
  }
  return calls;
}

namespace {

struct DimNames {
  const char* rows;
  const char* out;
  const char* in;
};
constexpr DimNames kLossHeadNames{"rows", "vocab_size", "hidden_size"};
constexpr DimNames kLinearNames{"linear rows", "linear out", "linear in"};

// y[rows, out] = x[rows, in] w[out, in]^T: column-major y^T (out x rows, ld out) = op_T(w) x^T.
GemmCall forward_call(const Bf16Bits* x, const Bf16Bits* w, void* y, cudaDataType_t y_type, std::int64_t rows,
                      std::int64_t out, std::int64_t in, const DimNames& names) {
  const int m = cublas_dimension(out, names.out), n = cublas_dimension(rows, names.rows),
            k = cublas_dimension(in, names.in);
  return GemmCall{CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, y, y_type, m};
}

// dx[rows, in] = dy[rows, out] w[out, in]: column-major dx^T (in x rows, ld in) = w^T dy^T.
GemmCall input_grad_call(const Bf16Bits* dy, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t out,
                         std::int64_t in, float beta, const DimNames& names) {
  const int m = cublas_dimension(in, names.in), n = cublas_dimension(rows, names.rows),
            k = cublas_dimension(out, names.out);
  return GemmCall{CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, w, CUDA_R_16BF, m, dy, CUDA_R_16BF, k, dx, CUDA_R_32F, m, beta};
}

}  // namespace

GemmCall logits_gemm_call(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* z, std::int64_t rows, std::int64_t vocab,
                          std::int64_t hidden) {
  return forward_call(x, w, z, CUDA_R_16BF, rows, vocab, hidden, kLossHeadNames);
}

GemmCall input_grad_gemm_call(const Bf16Bits* dz, const Bf16Bits* w, float* dx, std::int64_t rows, std::int64_t vocab,
                              std::int64_t hidden) {
  return input_grad_call(dz, w, dx, rows, vocab, hidden, 0.0f, kLossHeadNames);
}

GemmCall linear_forward_gemm_call(const Bf16Bits* x, const Bf16Bits* w, float* y, std::int64_t rows, std::int64_t out,
                                  std::int64_t in) {
  return forward_call(x, w, y, CUDA_R_32F, rows, out, in, kLinearNames);
}

GemmCall linear_forward_gemm_call(const Bf16Bits* x, const Bf16Bits* w, Bf16Bits* y, std::int64_t rows,
                                  std::int64_t out, std::int64_t in) {
  return forward_call(x, w, y, CUDA_R_16BF, rows, out, in, kLinearNames);
}

GemmCall linear_input_grad_gemm_call(const Bf16Bits* dy, const Bf16Bits* w, float* dx, std::int64_t rows,
                                     std::int64_t out, std::int64_t in, bool accumulate) {
  return input_grad_call(dy, w, dx, rows, out, in, accumulate ? 1.0f : 0.0f, kLinearNames);
}

// dW[out, in] += dy^T x: column-major dW^T (in x out, ld in) = x^T (in x rows, ld in) times
// op_T(dy^T stored out x rows, ld out); beta 1 adds to what earlier sequences and chunks summed.
GemmCall linear_weight_grad_gemm_call(const Bf16Bits* dy, const Bf16Bits* x, float* dw, std::int64_t rows,
                                      std::int64_t out, std::int64_t in) {
  const int m = cublas_dimension(in, kLinearNames.in), n = cublas_dimension(out, kLinearNames.out),
            k = cublas_dimension(rows, kLinearNames.rows);
  return GemmCall{CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, x, CUDA_R_16BF, m, dy, CUDA_R_16BF, n, dw, CUDA_R_32F, m, 1.0f};
}

}  // namespace dflash
