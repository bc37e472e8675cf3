/* A stand-in libcudart for tests without a GPU: "device memory" is host memory (malloc), copies are memcpy,
 * every stream is done at once. It records what it was asked (fake_* below) and fails on request, so the
 * ctypes layer of sol_backend_cuda.runtime and OffloadedModel's use of it are tested on any machine. */
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

static int fail_code = 0;      /* the next call of fail_call returns this */
static char fail_call[64] = "";
static int device = -1;
static long counts[8];         /* 0 malloc, 1 free, 2 h2d, 3 d2h, 4 d2d, 5 sync, 6 setdevice */
static void* last_stream = (void*)-1;
static long live_bytes = 0;

void fake_fail(const char* call, int code) { strncpy(fail_call, call, sizeof fail_call - 1); fail_code = code; }
long fake_count(int what) { return counts[what]; }
void* fake_last_stream(void) { return last_stream; }
int fake_device(void) { return device; }
long fake_live_bytes(void) { return live_bytes; }

static int failing(const char* call) {
  if (fail_code && strcmp(call, fail_call) == 0) { int c = fail_code; fail_code = 0; return c; }
  return 0;
}

const char* cudaGetErrorString(int code) {
  switch (code) {
    case 0: return "no error";
    case 2: return "out of memory";
    case 700: return "an illegal memory access was encountered";
    default: return "unrecognized error code";
  }
}
const char* cudaGetErrorName(int code) {
  switch (code) {
    case 0: return "cudaSuccess";
    case 2: return "cudaErrorMemoryAllocation";
    case 700: return "cudaErrorIllegalAddress";
    default: return "cudaErrorUnknown";
  }
}
int cudaRuntimeGetVersion(int* v) { *v = 13000; return 0; }
int cudaSetDevice(int d) { int c = failing("cudaSetDevice"); if (c) return c; device = d; counts[6]++; return 0; }
int cudaMalloc(void** p, size_t n) {
  int c = failing("cudaMalloc"); if (c) return c;
  /* 256-byte aligned like the real one; the size is kept in front for fake_live_bytes */
  char* raw = (char*)aligned_alloc(256, ((n + 256 + 255) / 256) * 256);
  *(size_t*)raw = n; live_bytes += (long)n; counts[0]++;
  *p = raw + 256;
  return 0;
}
int cudaFree(void* p) {
  int c = failing("cudaFree"); if (c) return c;
  if (p) { char* raw = (char*)p - 256; live_bytes -= (long)*(size_t*)raw; free(raw); }
  counts[1]++;
  return 0;
}
int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* stream) {
  int c = failing("cudaMemcpyAsync"); if (c) return c;
  memcpy(dst, src, n); last_stream = stream;
  if (kind >= 1 && kind <= 3) counts[1 + kind]++;
  return 0;
}
int cudaStreamSynchronize(void* stream) {
  int c = failing("cudaStreamSynchronize"); if (c) return c;
  last_stream = stream; counts[5]++; return 0;
}
