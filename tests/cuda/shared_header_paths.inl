// The body of shared_headers_via_*(): included once by an nvcc translation unit and once by a
// host-compiler one, with DFLASH_SHARED_HEADER_PATH naming the function.
#include "common/bf16.hpp"
#include "common/dropout_rng.hpp"
#include "common/row_stats.hpp"

namespace dflash {

SharedHeaderOutputs DFLASH_SHARED_HEADER_PATH(const SharedHeaderInputs& in) {
  const auto n = static_cast<std::int64_t>(in.z.size());
  HybridRowStats<float> streamed, left, right;
  for (std::int64_t v = 0; v < n; ++v) {
    streamed.update(in.z[v], in.t[v], v, in.label, in.tau);
    (v < n / 2 ? left : right).update(in.z[v], in.t[v], v, in.label, in.tau);
  }
  const HybridRowStats<float> merged = HybridRowStats<float>::merge(left, right);
  SharedHeaderOutputs out;
  const HybridRowStats<float>* both[] = {&streamed, &merged};
  for (const HybridRowStats<float>* s : both) {
    out.stats.insert(out.stats.end(),
                     {s->max_z, s->sum_z, s->max_zt, s->sum_zt, s->max_tt, s->sum_tt, s->q_diff, s->z_label});
    out.indices.insert(out.indices.end(), {s->argmax, s->count});
  }
  const HybridRowResult<float> row = finish_row(streamed, in.tau);
  out.row = {row.lse_z, row.lse_zt, row.lse_tt, row.ce, row.kl};
  for (std::int64_t v = 0; v < n; ++v) {
    out.grads.push_back(hybrid_logit_grad(in.z[v], teacher_log_prob(in.t[v], row, in.tau), v == in.label, row, in.tau,
                                          0.85f, 0.15f, 0.125f));
  }
  for (std::uint64_t e = 0; e < 64; ++e) {
    const std::uint32_t stream = rng_stream(static_cast<std::uint32_t>(e % 7), 3, 2);
    out.words.push_back(rng_word(in.seed, stream, 11, e * 977));
    out.words.push_back(dropout_keeps(in.seed, stream, 11, e, dropout_threshold(0.3)) ? 1u : 0u);
  }
  for (float x : in.to_round) out.bf16.push_back(bf16_bits_from_float(x));
  return out;
}

}  // namespace dflash
