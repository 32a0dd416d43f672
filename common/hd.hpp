// Host/device annotation for code compiled both by the host compiler (the reference, CPU tests)
// and by nvcc (kernels). Everything under common/ must compile in both worlds.
#pragma once

#if defined(__CUDACC__)
#define DFLASH_HD __host__ __device__
#else
#define DFLASH_HD
#endif
