#include "cuda/loss_head/head.hpp"

namespace dflash {

CudaLossHead::CudaLossHead(DeviceAllocator& allocator, const LossHeadOptions& options)
    : allocator_(allocator),
      options_(validated_cuda_loss_head_options(options)),
      own_gemm_(std::make_unique<CublasGemm>(allocator)),
      head_(CudaLossHeadBackend{allocator, *own_gemm_}, options_) {}

CudaLossHead::CudaLossHead(DeviceAllocator& allocator, const LossHeadOptions& options, CublasGemm& gemm)
    : allocator_(allocator),
      options_(validated_cuda_loss_head_options(options)),
      head_(CudaLossHeadBackend{allocator, gemm}, options_) {}

CudaLossHeadForward CudaLossHead::forward(const Bf16Bits* hidden, const CudaLossHeadShape& shape,
                                          const CudaLossHeadTargets& in, double weight_sum) {
  return head_.forward(hidden, shape, in, weight_sum);
}

DeviceBuffer<float> CudaLossHead::backward(const CudaLossHeadTargets& in, CudaLossHeadSaved saved) {
  return head_.backward(in, std::move(saved));
}

}  // namespace dflash
