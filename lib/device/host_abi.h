/* host_abi.h — the calling convention between the host backend and a compiled kernel module.
 *
 * Shared by lib/device/host_backend.cpp and (through host_shim.h) every module the host backend
 * compiles; embedded into the library at build time and part of every module's cache key, so a
 * change here can never meet a stale module. Plain C so both sides agree on the layout. */
#ifndef GR_HOST_ABI_H
#define GR_HOST_ABI_H

#ifdef __cplusplus
extern "C" {
#endif

/* One call of a module's gr_host_launch_<kernel> runs blocks [block_begin, block_end) of a launch
 * as thread `thread` of each block. With blockDim 1 the backend makes one call per OS thread and
 * range; with blockDim > 1 it makes one call per (block, thread), each on its own fiber. */
struct gr_host_ctx {
  unsigned grid;        /* gridDim.x */
  unsigned block;       /* blockDim.x */
  unsigned block_begin; /* blockIdx.x runs over [block_begin, block_end) */
  unsigned block_end;
  unsigned thread;      /* threadIdx.x */
  /* __syncthreads(): switches back to the block scheduler. Null when blockDim is 1. */
  void (*barrier)(void* sched);
  void* sched;
};

/* gr_host_launch_<kernel>(ctx, args): args[i] points at the i-th argument (8 bytes each). */
typedef void (*gr_host_launch_fn)(const struct gr_host_ctx* ctx, void** args);
/* gr_host_nargs_<kernel>(): the kernel's parameter count (so a capture can copy the arguments). */
typedef unsigned (*gr_host_nargs_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* GR_HOST_ABI_H */
