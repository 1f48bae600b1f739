#include "kernels/host_kernels.h"

#include "kernels/gemm.h"
#include "kernels/int8_matmul.h"
#include "kernels/paged_attention.h"

namespace torchtpu::kernels {

const std::vector<HostKernel>& host_kernels() {
  static const std::vector<HostKernel> table = {
      {kPagedAttentionTarget, &torchtpu_paged_attention_ffi},
      {kInt8MatmulTarget, &torchtpu_int8_matmul_ffi},
      {kGemmTarget, &torchtpu_gemm_ffi},
  };
  return table;
}

}  // namespace torchtpu::kernels
