// cuda_runtime.h of sol_backend_cuda.emulation: CUDA's execution model on the host (tests only).
//
// The lanes of a warp are fibers (ucontext) on the launching thread, not OS threads: a lane runs until its next
// shuffle (or its end) and hands control back to the warp, which runs the other lanes to the same point. One
// round over the lanes is a barrier, so the lanes meet at every shuffle as a warp's do, in a fixed order and with
// no thread scheduling at all. (32 OS threads per warp meeting at std::barrier made a transformer layer's
// training step take 13 s on two idle cores and 360 s beside one other busy process.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <math.h>
#include <memory>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct sol_emu_dim3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local sol_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

typedef void* cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
enum cudaLimit { cudaLimitMallocHeapSize = 2 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit) { *value = (size_t)8 << 20; return cudaSuccess; }
inline cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
template <class T> cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* source, size_t bytes, size_t offset,
                                                       cudaMemcpyKind, cudaStream_t) {
  memcpy((char*)&symbol + offset, source, bytes);
  return cudaSuccess;
}
template <class T> cudaError_t cudaMemcpyFromSymbolAsync(void* target, const T& symbol, size_t bytes, size_t offset,
                                                         cudaMemcpyKind, cudaStream_t) {
  memcpy(target, (const char*)&symbol + offset, bytes);
  return cudaSuccess;
}
inline int atomicExch(int* address, int value) { return __atomic_exchange_n(address, value, __ATOMIC_SEQ_CST); }

// A warp: up to 32 lanes, each a fiber with its own stack, run in rounds by the warp's scheduling loop.
struct sol_emu_warp {
  static constexpr size_t stack_bytes = (size_t)1 << 20;  // a lane's locals (a thread's stack would be 8 MiB)
  std::function<void()> body;  // the kernel call every lane makes
  unsigned lanes = 0, current = 0;
  bool done[32] = {};
  ucontext_t scheduler, lane_context[32];
  std::unique_ptr<char[]> stacks{new char[32 * stack_bytes]};
  alignas(16) unsigned char mailbox[32][16];

  // Where a lane waits for the others: back to the scheduling loop, which resumes it in the next round.
  void meet() { swapcontext(&lane_context[current], &scheduler); }
  void run(unsigned first, unsigned count);
};
inline thread_local sol_emu_warp* sol_emu_this_warp = nullptr;

inline void sol_emu_lane_main() {
  sol_emu_warp* warp = sol_emu_this_warp;
  warp->body();
  warp->done[warp->current] = true;  // a lane that is done no longer holds the others at a shuffle
}  // returns to uc_link: the scheduling loop

// Runs lanes first .. first + count - 1 of the block to their ends, round after round.
inline void sol_emu_warp::run(unsigned first, unsigned count) {
  lanes = count;
  for (unsigned lane = 0; lane < lanes; ++lane) {
    done[lane] = false;
    getcontext(&lane_context[lane]);
    lane_context[lane].uc_stack.ss_sp = stacks.get() + lane * stack_bytes;
    lane_context[lane].uc_stack.ss_size = stack_bytes;
    lane_context[lane].uc_link = &scheduler;
    makecontext(&lane_context[lane], sol_emu_lane_main, 0);
  }
  sol_emu_warp* outer = sol_emu_this_warp;
  sol_emu_this_warp = this;
  for (bool running = true; running;) {
    running = false;
    for (unsigned lane = 0; lane < lanes; ++lane) {
      if (done[lane]) continue;
      current = lane;
      threadIdx.x = first + lane;
      swapcontext(&scheduler, &lane_context[lane]);
      running = running || !done[lane];
    }
  }
  sol_emu_this_warp = outer;
}

template <class T> T __shfl_xor_sync(unsigned, T value, int lane_mask) {
  static_assert(sizeof(T) <= 16, "a shuffled value fits a mailbox slot");
  sol_emu_warp* warp = sol_emu_this_warp;
  const unsigned lane = threadIdx.x & 31u;
  memcpy(warp->mailbox[lane], &value, sizeof(T));
  warp->meet();  // every lane has written its value
  T partner;
  memcpy(&partner, warp->mailbox[lane ^ (unsigned)lane_mask], sizeof(T));
  warp->meet();  // every lane has read its partner's before any writes again
  return partner;
}

// kernel<<<grid, threads, 0, stream>>>(args) becomes sol_emu_launch(kernel, grid, threads)(args): one block of
// ``threads`` threads, its warps one after another, the lanes of a warp as fibers.
template <class... Params> struct sol_emu_launcher {
  void (*kernel)(Params...);
  unsigned threads;
  template <class... Args> void operator()(Args... args) const {
    sol_emu_warp warp;
    warp.body = [&] { kernel(args...); };
    blockIdx.x = 0; blockDim.x = threads; gridDim.x = 1;
    for (unsigned first = 0; first < threads; first += 32)
      warp.run(first, threads - first < 32 ? threads - first : 32);
  }
};
template <class... Params> sol_emu_launcher<Params...> sol_emu_launch(void (*kernel)(Params...), unsigned,
                                                                      unsigned threads) {
  return {kernel, threads};
}
