// Every CUDA and NCCL version test of TIDE, in one place (style.md, habit 4). Code tests the
// feature macros below, never a version number.
//   TIDE_HAS_CUDA_RUNTIME    the CUDA runtime headers are visible (included before this one)
//   TIDE_HAS_TMA_BULK        device code: cp.async.bulk with mbarrier transaction counts (sm_90+)
//   TIDE_HAS_MULTIMEM        device code: multimem.ld_reduce (sm_90+, PTX ISA 8.1+; run-time
//                            gated again, landing.hpp)
//   TIDE_HAS_NCCL_DEVICE_API  NCCL >= 2.28 (TIDE_NCCL_FABRIC_MIN_*, exported by rules.hpp):
//                            symmetric windows, LSA pointers and barrier, GIN
//   TIDE_HAS_NCCL_HOST_RMA    NCCL >= 2.29: ncclPutSignal / ncclWaitSignal
//   TIDE_HAS_NCCL_CONFIG_CTAS  NCCL >= 2.17: ncclConfig_t minCTAs / maxCTAs
//   TIDE_HAS_NCCL_COMM_SPLIT   NCCL >= 2.18: ncclCommSplit (rail communicators, Sec. 6.1)
//   TIDE_HAS_NCCL_MEM_ALLOC    NCCL >= 2.19: ncclMemAlloc / ncclMemFree
//   TIDE_HAS_NCCL_SYMMETRIC_WINDOWS   NCCL >= 2.27: ncclCommWindowRegister, symmetric flag
//   TIDE_HAS_NCCL_HOST_PEER_POINTERS  NCCL >= 2.29: LSA peer pointers on the host (else a kernel)
//   TIDE_HAS_NCCL_FABRIC     all of CONFIG_CTAS, COMM_SPLIT, MEM_ALLOC, SYMMETRIC_WINDOWS and
//                            DEVICE_API: src/fabric/nccl #errors without it
//   TIDE_HAS_CUDA_MEMCPY_BATCH  CUDA >= 12.8: cudaMemcpyBatchAsync (with
//     TIDE_CUDA_MEMCPY_BATCH_FAIL_INDEX, its 12.8-12.9 failIdx signature)
//   TIDE_HAS_DRIVER_ENTRY_POINT_BY_VERSION  CUDA >= 12.5: cudaGetDriverEntryPointByVersion
// CUDA gates need cuda_runtime_api.h included first, NCCL gates nccl.h.
#pragma once

#if defined(__CUDACC__) || defined(CUDART_VERSION)
#define TIDE_HAS_CUDA_RUNTIME 1
#else
#define TIDE_HAS_CUDA_RUNTIME 0
#endif

// Device-side feature gates: only meaningful inside a device compilation pass.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define TIDE_HAS_TMA_BULK 1
#define TIDE_HAS_MULTIMEM 1
#else
#define TIDE_HAS_TMA_BULK 0
#define TIDE_HAS_MULTIMEM 0
#endif

// The oldest NCCL of the nccl backend: the device API's (the newest of TIDE_HAS_NCCL_FABRIC's).
#define TIDE_NCCL_FABRIC_MIN_MAJOR 2
#define TIDE_NCCL_FABRIC_MIN_MINOR 28

#if defined(NCCL_VERSION_CODE) && defined(NCCL_VERSION)
#if NCCL_VERSION_CODE >= NCCL_VERSION(TIDE_NCCL_FABRIC_MIN_MAJOR, TIDE_NCCL_FABRIC_MIN_MINOR, 0)
#define TIDE_HAS_NCCL_DEVICE_API 1
#else
#define TIDE_HAS_NCCL_DEVICE_API 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
#define TIDE_HAS_NCCL_HOST_RMA 1
#else
#define TIDE_HAS_NCCL_HOST_RMA 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 17, 0)
#define TIDE_HAS_NCCL_CONFIG_CTAS 1
#else
#define TIDE_HAS_NCCL_CONFIG_CTAS 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
#define TIDE_HAS_NCCL_COMM_SPLIT 1
#else
#define TIDE_HAS_NCCL_COMM_SPLIT 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 19, 0)
#define TIDE_HAS_NCCL_MEM_ALLOC 1
#else
#define TIDE_HAS_NCCL_MEM_ALLOC 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define TIDE_HAS_NCCL_SYMMETRIC_WINDOWS 1
#else
#define TIDE_HAS_NCCL_SYMMETRIC_WINDOWS 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
#define TIDE_HAS_NCCL_HOST_PEER_POINTERS 1
#else
#define TIDE_HAS_NCCL_HOST_PEER_POINTERS 0
#endif
#else
#define TIDE_HAS_NCCL_DEVICE_API 0
#define TIDE_HAS_NCCL_HOST_RMA 0
#define TIDE_HAS_NCCL_CONFIG_CTAS 0
#define TIDE_HAS_NCCL_COMM_SPLIT 0
#define TIDE_HAS_NCCL_MEM_ALLOC 0
#define TIDE_HAS_NCCL_SYMMETRIC_WINDOWS 0
#define TIDE_HAS_NCCL_HOST_PEER_POINTERS 0
#endif

#if TIDE_HAS_NCCL_CONFIG_CTAS && TIDE_HAS_NCCL_COMM_SPLIT && TIDE_HAS_NCCL_MEM_ALLOC && \
    TIDE_HAS_NCCL_SYMMETRIC_WINDOWS && TIDE_HAS_NCCL_DEVICE_API
#define TIDE_HAS_NCCL_FABRIC 1
#else
#define TIDE_HAS_NCCL_FABRIC 0
#endif

#if defined(CUDART_VERSION) && CUDART_VERSION >= 12080
#define TIDE_HAS_CUDA_MEMCPY_BATCH 1
#define TIDE_CUDA_MEMCPY_BATCH_FAIL_INDEX (CUDART_VERSION < 13000)
#else
#define TIDE_HAS_CUDA_MEMCPY_BATCH 0
#define TIDE_CUDA_MEMCPY_BATCH_FAIL_INDEX 0
#endif

#if defined(CUDART_VERSION) && CUDART_VERSION >= 12050
#define TIDE_HAS_DRIVER_ENTRY_POINT_BY_VERSION 1
#else
#define TIDE_HAS_DRIVER_ENTRY_POINT_BY_VERSION 0
#endif
