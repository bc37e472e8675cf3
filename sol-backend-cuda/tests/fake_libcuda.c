/* A stand-in libcuda.so.1 with the driver API's ABI for the calls SOL's probe
 * makes: two GPUs, or the cuInit error code given in FAKE_CUDA_INIT_ERROR.
 * It lets the tests run the real ctypes layer (and sol-core's out-of-process
 * probe) on machines without an NVIDIA GPU. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static int initialised = 0;

int cuInit(unsigned int flags) {
    const char *error = getenv("FAKE_CUDA_INIT_ERROR");
    if (flags != 0) return 1; /* CUDA_ERROR_INVALID_VALUE */
    if (error && atoi(error)) return atoi(error);
    initialised = 1;
    return 0;
}
int cuDriverGetVersion(int *version) { *version = 13000; return 0; }
int cuDeviceGetCount(int *count) {
    if (!initialised) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
    *count = 2;
    return 0;
}
int cuDeviceGet(int *device, int ordinal) {
    if (ordinal < 0 || ordinal > 1) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *device = ordinal;
    return 0;
}
int cuDeviceGetName(char *name, int len, int device) {
    snprintf(name, (size_t)len, "%s", device == 0 ? "NVIDIA H100 80GB HBM3" : "NVIDIA A100-SXM4-40GB");
    return 0;
}
int cuDeviceTotalMem_v2(size_t *bytes, int device) {
    *bytes = device == 0 ? 85017624576ULL : 42505273344ULL;
    return 0;
}
int cuDeviceGetAttribute(int *value, int attribute, int device) {
    switch (attribute) {
    case 16: *value = device == 0 ? 132 : 108; return 0; /* multiprocessors */
    case 75: *value = device == 0 ? 9 : 8; return 0;     /* compute capability major */
    case 76: *value = 0; return 0;                       /* compute capability minor */
    default: return 1;
    }
}
int cuDeviceGetPCIBusId(char *id, int len, int device) {
    snprintf(id, (size_t)len, "00000000:%02X:00.0", device == 0 ? 0x18 : 0x2A);
    return 0;
}
int cuGetErrorName(int error, const char **name) {
    switch (error) {
    case 3: *name = "CUDA_ERROR_NOT_INITIALIZED"; return 0;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 101: *name = "CUDA_ERROR_INVALID_DEVICE"; return 0;
    default: return 1;
    }
}
