#include "cuda/loss_head/head.hpp"

namespace dflash {

CudaLossHead::CudaLossHead(DeviceAllocator& allocator, const LossHeadOptions& options)
    : allocator_(allocator),
      options_(validated_cuda_loss_head_options(options)),
      gemm_(allocator),
      head_(CudaLossHeadBackend{allocator, gemm_}, options_) {}

CudaLossHeadForward CudaLossHead::forward(const Bf16Bits* hidden, const CudaLossHeadShape& shape,
                                          const CudaLossHeadTargets& in, double weight_sum) {
  return head_.forward(hidden, shape, in, weight_sum);
}

DeviceBuffer<float> CudaLossHead::backward(const CudaLossHeadTargets& in, CudaLossHeadSaved saved) {
  return head_.backward(in, std::move(saved));
}

}  // namespace dflash
