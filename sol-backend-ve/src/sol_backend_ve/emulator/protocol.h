// The wire protocol between the emulated libveda (client, in the user's
// process) and the emulated VE (server, a separate exec'd process).
//
// Every request is a fixed header plus an optional payload; every request gets
// exactly one reply, also a header plus payload.  The client sends the next
// request only after the previous reply arrived, so neither side ever blocks
// writing while the other is blocked writing too.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <sys/socket.h>
#include <unistd.h>

// VEDA's result codes, in the order of VEDA's enums.h (the numbers are ABI).
enum VEDAresult_enum {
    VEDA_SUCCESS = 0,
    VEDA_ERROR_ALREADY_INITIALIZED,
    VEDA_ERROR_CANNOT_CREATE_CONTEXT,
    VEDA_ERROR_CANNOT_CREATE_DEVICE,
    VEDA_ERROR_CANNOT_CREATE_STREAM,
    VEDA_ERROR_CANNOT_POP_CONTEXT,
    VEDA_ERROR_CANT_READ_SENSOR_FILE,
    VEDA_ERROR_FUNCTION_NOT_FOUND,
    VEDA_ERROR_INITIALIZING_DEVICE,
    VEDA_ERROR_INVALID_ARGS,
    VEDA_ERROR_INVALID_CONTEXT,
    VEDA_ERROR_INVALID_COREIDX,
    VEDA_ERROR_INVALID_DEVICE,
    VEDA_ERROR_INVALID_MODULE,
    VEDA_ERROR_INVALID_REQID,
    VEDA_ERROR_INVALID_STREAM,
    VEDA_ERROR_INVALID_VALUE,
    VEDA_ERROR_MODULE_NOT_FOUND,
    VEDA_ERROR_NOT_IMPLEMENTED,
    VEDA_ERROR_NOT_INITIALIZED,
    VEDA_ERROR_NO_DEVICES_FOUND,
    VEDA_ERROR_NO_SENSOR_FILE,
    VEDA_ERROR_OFFSETTED_VPTR_NOT_ALLOWED,
    VEDA_ERROR_OUT_OF_BOUNDS,
    VEDA_ERROR_OUT_OF_MEMORY,
    VEDA_ERROR_SHUTTING_DOWN,
    VEDA_ERROR_UNABLE_TO_DETECT_DEVICES,
    VEDA_ERROR_UNKNOWN_CONTEXT,
    VEDA_ERROR_UNKNOWN_DEVICE,
    VEDA_ERROR_UNKNOWN_KERNEL,
    VEDA_ERROR_UNKNOWN_MODULE,
    VEDA_ERROR_UNKNOWN_PPTR,
    VEDA_ERROR_UNKNOWN_ATTRIBUTE,
    VEDA_ERROR_UNKNOWN_STREAM,
    VEDA_ERROR_UNKNOWN_VPTR,
    VEDA_ERROR_VEDA_LD_LIBRARY_PATH_NOT_DEFINED,
    VEDA_ERROR_VEO_COMMAND_ERROR,
    VEDA_ERROR_VEO_COMMAND_EXCEPTION,
    VEDA_ERROR_VEO_COMMAND_UNFINISHED,
    VEDA_ERROR_VEO_COMMAND_UNKNOWN_ERROR,
    VEDA_ERROR_VEO_STATE_BLOCKED,
    VEDA_ERROR_VEO_STATE_RUNNING,
    VEDA_ERROR_VEO_STATE_SYSCALL,
    VEDA_ERROR_VEO_STATE_UNKNOWN,
    VEDA_ERROR_VPTR_ALREADY_ALLOCATED,
    VEDA_ERROR_TODO,
    VEDA_ERROR_ASSERT,
    VEDA_ERROR_CONTEXT_IS_DESTROYED,
    VEDA_ERROR_INVALID_HANDLE,
    VEDA_ERROR_UNKNOWN,
    VEDA_ERROR_INVALID_DTYPE,
    VEDA_ERROR_OFFSET_NOT_ALLOWED,
    VEDA_ERROR_UNKNOWN_HMEM,
    VEDA_ERROR_UNKNOWN_CALLBACK,
    VEDA_ERROR_CALLBACK_ALREADY_REGISTERED,
    VEDA_ERROR_MEMORY_MISALIGNED
};
typedef enum VEDAresult_enum VEDAresult;

enum VEDAargs_intent_enum { VEDA_ARGS_INTENT_IN = 0, VEDA_ARGS_INTENT_INOUT = 1, VEDA_ARGS_INTENT_OUT = 2 };

namespace vemu {

// VEDA's virtual pointer format: 5 bits device, 22 bits allocation index,
// 37 bits byte offset.  Using the same layout keeps VEDA's pointer arithmetic
// (vptr + n) meaningful for code written against the real runtime.
constexpr uint64_t kBitsIdx = 0x07FFFFE000000000ull;
constexpr uint64_t kBitsOffset = 0x0000001FFFFFFFFFull;
constexpr int kShiftIdx = 37;
inline uint32_t vptr_idx(uint64_t v) { return uint32_t((v & kBitsIdx) >> kShiftIdx); }
inline uint64_t vptr_offset(uint64_t v) { return v & kBitsOffset; }
inline uint64_t make_vptr(uint32_t idx) { return uint64_t(idx) << kShiftIdx; }

enum Op : uint32_t { OP_ALLOC = 1, OP_FREE, OP_HTOD, OP_DTOH, OP_DTOD, OP_MEMPTR, OP_LOAD, OP_UNLOAD, OP_SYMBOL, OP_LAUNCH, OP_QUIT };

struct Request {
    uint32_t op;
    uint32_t reserved;
    uint64_t a, b, c;   // meaning per op, see server.cpp
    uint64_t payload;   // bytes following the header
};

struct Reply {
    int32_t status;     // VEDA_SUCCESS, a VEDAresult, or kStatusFatal
    uint32_t reserved;
    uint64_t value;
    uint64_t payload;   // bytes following: data, or an error message when status != 0
};

// The server is about to die (a kernel faulted); the payload says why.
constexpr int32_t kStatusFatal = -1;

// Kernel arguments in a launch payload: [u64 name length][name]
// [u64 count][count x LaunchArg][stack data of the IN/INOUT stack args, in order].
enum ArgKind : uint32_t { ARG_VALUE = 0, ARG_VPTR = 1, ARG_STACK = 2 };
struct LaunchArg {
    uint32_t kind;
    uint32_t intent;
    uint64_t value;     // the integer, or the vptr
    uint64_t size;      // stack bytes
};
constexpr int kMaxArgs = 32;

inline bool write_all(int fd, const void* data, size_t n) {
    auto p = static_cast<const char*>(data);
    while (n > 0) {
        // MSG_NOSIGNAL: a dead peer is an error to report, not a SIGPIPE to die of.
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= size_t(w);
    }
    return true;
}

inline bool read_all(int fd, void* data, size_t n) {
    auto p = static_cast<char*>(data);
    while (n > 0) {
        ssize_t r = ::read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= size_t(r);
    }
    return true;
}

}  // namespace vemu
