// XSTAGE_HD marks index math and schedulers that run both in kernels and in CPU tests.
#pragma once

#if defined(__CUDACC__)
#define XSTAGE_HD __host__ __device__
#else
#define XSTAGE_HD
#endif
