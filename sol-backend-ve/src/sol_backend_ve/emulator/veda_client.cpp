// The emulated libveda: the subset of NEC's VEDA C API that SOL uses, with
// the same symbol names and signatures, so SOL's ctypes binding (veda.py)
// runs against it unchanged.  Device memory and kernels live in a separate
// process (server.cpp), reached only through copies.
//
// One device (ve:0), one in-order stream (0).  "Async" calls put a command on
// a queue and return; a worker thread carries the commands to the server one
// at a time and writes results (DtoH data, OUT stack args, kernel results)
// into the caller's memory when each completes.  Errors of queued commands
// are reported by the next vedaStreamSynchronize; a server that died (a kernel
// faulted) makes this and every later call fail until vedaExit.
#include "protocol.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

using namespace vemu;

typedef int VEDAdevice;
typedef int VEDAstream;
typedef uint64_t VEDAdeviceptr;  // a pointer type in VEDA's headers; same ABI
struct EmuContext { int device; };
struct EmuModule {
    uint64_t id;
    std::list<std::string> names;  // VEDAfunction.kernel points into these
};
typedef EmuContext* VEDAcontext;
typedef EmuModule* VEDAmodule;
struct VEDAfunction {
    uint64_t ptr;
    const char* kernel;
};

struct EmuArg {
    bool set = false;
    uint32_t kind = ARG_VALUE;
    uint32_t intent = VEDA_ARGS_INTENT_IN;
    uint64_t value = 0;
    void* host = nullptr;  // stack arguments: the caller's buffer
    uint64_t size = 0;
};
struct veo_args { std::vector<EmuArg> args; };
typedef veo_args* VEDAargs;

namespace {

const char* const kName = "NEC SX-Aurora VE (emulated)";

// A queued command and where its results go.
struct Command {
    Request rq{};
    const void* send = nullptr;        // HtoD: read from the caller's buffer when it runs
    std::vector<char> payload;         // or owned bytes (paths, names, launch arguments)
    void* receive = nullptr;           // DtoH destination
    std::vector<std::pair<void*, uint64_t>> outs;  // OUT/INOUT stack args
    uint64_t* result = nullptr;        // kernel result
    uint64_t value = 0;                // reply value (for synchronous calls)
    bool done = false;
};
using CommandPtr = std::shared_ptr<Command>;

struct Emulator {
    std::mutex m;
    std::condition_variable cv;
    bool initialized = false;
    bool started = false;
    int fd = -1;
    pid_t pid = -1;
    std::thread worker;
    std::deque<CommandPtr> queue;
    size_t pending = 0;                // queued or running
    bool stopping = false;
    VEDAresult async_error = VEDA_SUCCESS;
    std::string async_detail;
    bool lost = false;                 // the server is gone: every call fails
    std::string lost_detail;
    std::unordered_map<uint32_t, uint64_t> blocks;  // live allocations: idx -> bytes
    uint32_t next_idx = 1;             // 0 would make the first vptr NULL
    uint64_t used = 0, capacity = 0;
    EmuContext context{0};
};
Emulator g;
std::mutex g_detail_mutex;
std::string g_detail;  // the last error's explanation (solVedaEmuLastError)
thread_local std::vector<VEDAcontext> t_contexts;

VEDAresult fail(VEDAresult code, const std::string& detail) {
    std::lock_guard<std::mutex> lock(g_detail_mutex);
    g_detail = detail;
    return code;
}

uint64_t parse_bytes(const char* text, uint64_t fallback) {
    if (!text || !*text) return fallback;
    char* end = nullptr;
    double v = strtod(text, &end);
    switch (end && *end ? (*end | 0x20) : 0) {
    case 'k': v *= 1024.0; break;
    case 'm': v *= 1024.0 * 1024; break;
    case 'g': v *= 1024.0 * 1024 * 1024; break;
    case 't': v *= 1024.0 * 1024 * 1024 * 1024; break;
    }
    return v > 0 ? uint64_t(v) : fallback;
}

// The server binary sits next to this library (the Python side builds both).
std::string server_path() {
    if (const char* env = getenv("SOL_VE_EMULATE_SERVER")) return env;
    Dl_info info{};
    dladdr(reinterpret_cast<void*>(&server_path), &info);
    std::string self = info.dli_fname ? info.dli_fname : "";
    return self.substr(0, self.rfind('/') + 1) + "ve-emulator-server";
}

// Called with g.m held by the worker when the connection breaks.
void mark_lost(std::string why) {
    if (why.empty()) {
        int status = 0;
        why = "the emulated ve:0 (server process " + std::to_string(g.pid) + ") died";
        if (g.pid > 0 && waitpid(g.pid, &status, 0) == g.pid) {
            if (WIFSIGNALED(status)) why += " of signal " + std::to_string(WTERMSIG(status));
            else if (WIFEXITED(status)) why += " with exit status " + std::to_string(WEXITSTATUS(status));
            g.pid = -1;
        }
    }
    g.lost = true;
    g.lost_detail = why + "; the device is lost";
    g.pending = 0;
    g.queue.clear();
}

// Runs one command against the server; false when the server is gone, with
// the server's last words (if any) in *fatal.
bool execute(Command& c, VEDAresult* status, std::string* message, std::string* fatal) {
    Request rq = c.rq;
    const void* body = c.send ? c.send : c.payload.data();
    if (!c.send) rq.payload = c.payload.size();
    if (!write_all(g.fd, &rq, sizeof rq) || (rq.payload && !write_all(g.fd, body, rq.payload))) return false;
    Reply r{};
    if (!read_all(g.fd, &r, sizeof r)) return false;
    if (r.status != VEDA_SUCCESS) {
        message->resize(r.payload);
        if (r.payload && !read_all(g.fd, &(*message)[0], r.payload)) return false;
        if (r.status == kStatusFatal) {
            *fatal = *message;
            return false;
        }
        *status = VEDAresult(r.status);
        return true;
    }
    c.value = r.value;
    if (c.result) *c.result = r.value;  // written when the kernel finished
    if (c.receive) return read_all(g.fd, c.receive, r.payload);
    for (auto& [dst, n] : c.outs)
        if (!read_all(g.fd, dst, n)) return false;
    return true;
}

void worker_loop() {
    std::unique_lock<std::mutex> lock(g.m);
    for (;;) {
        g.cv.wait(lock, [] { return g.stopping || !g.queue.empty(); });
        if (g.queue.empty()) return;  // stopping and drained
        CommandPtr c = g.queue.front();
        g.queue.pop_front();
        lock.unlock();
        VEDAresult status = VEDA_SUCCESS;
        std::string message, fatal;
        bool alive = execute(*c, &status, &message, &fatal);
        lock.lock();
        c->done = true;
        if (!alive) {
            mark_lost(fatal);
        } else {
            --g.pending;
            if (status != VEDA_SUCCESS && g.async_error == VEDA_SUCCESS) {
                g.async_error = status;
                g.async_detail = message;
            }
        }
        g.cv.notify_all();
    }
}

VEDAresult lost_error() { return fail(VEDA_ERROR_VEO_COMMAND_EXCEPTION, g.lost_detail); }

void stop_server();

VEDAresult start_server() {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return fail(VEDA_ERROR_INITIALIZING_DEVICE, "socketpair failed: " + std::string(strerror(errno)));
    std::string path = server_path(), fd_text = std::to_string(fds[1]);
    char* argv[] = {const_cast<char*>(path.c_str()), const_cast<char*>(fd_text.c_str()), nullptr};
    pid_t pid = fork();
    if (pid == 0) {
        // Only async-signal-safe calls between fork and exec: the parent may
        // be multi-threaded.  The server's end must survive exec.
        int flags = fcntl(fds[1], F_GETFD);
        fcntl(fds[1], F_SETFD, flags & ~FD_CLOEXEC);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return fail(VEDA_ERROR_INITIALIZING_DEVICE, "fork failed: " + std::string(strerror(errno)));
    }
    g.fd = fds[0];
    g.pid = pid;
    g.started = true;
    g.stopping = false;
    g.lost = false;
    g.worker = std::thread(worker_loop);
    // A process that exits without vedaExit (Python at shutdown) must not destroy a joinable worker thread
    // (std::terminate): stop the server first, as vedaExit would.
    static bool stop_at_exit = false;
    if (!stop_at_exit) {
        atexit(stop_server);
        stop_at_exit = true;
    }
    return VEDA_SUCCESS;
}

void stop_server() {
    if (!g.started) return;
    {
        std::unique_lock<std::mutex> lock(g.m);
        if (!g.lost) {
            auto quit = std::make_shared<Command>();
            quit->rq.op = OP_QUIT;
            g.queue.push_back(quit);
            ++g.pending;
        }
        g.stopping = true;
        g.cv.notify_all();
        // A kernel that never returns must not hang vedaExit: give the queue
        // a while, then take the device down the hard way.
        if (!g.cv.wait_for(lock, std::chrono::seconds(5), [] { return g.pending == 0; }) && g.pid > 0)
            kill(g.pid, SIGKILL);
    }
    g.worker.join();
    close(g.fd);
    if (g.pid > 0) {
        int status;
        waitpid(g.pid, &status, 0);
    }
    g.fd = -1;
    g.pid = -1;
    g.started = false;
    g.queue.clear();
    g.pending = 0;
    g.blocks.clear();
    g.used = 0;
    g.async_error = VEDA_SUCCESS;
    g.lost = false;
}

// Checks common to every device call; g.m must be held.
VEDAresult ready(VEDAstream stream = 0) {
    if (!g.initialized) return fail(VEDA_ERROR_NOT_INITIALIZED, "vedaInit was not called");
    if (g.lost) return lost_error();
    if (!g.started || t_contexts.empty() || !t_contexts.back())
        return fail(VEDA_ERROR_UNKNOWN_CONTEXT, "no current context on this thread (vedaDevicePrimaryCtxRetain + vedaCtxPushCurrent)");
    if (stream != 0) return fail(VEDA_ERROR_UNKNOWN_STREAM, "the emulated ve:0 has one stream, 0");
    return VEDA_SUCCESS;
}

VEDAresult enqueue(const CommandPtr& c) {
    g.queue.push_back(c);
    ++g.pending;
    g.cv.notify_all();
    return VEDA_SUCCESS;
}

// Waits for everything queued so far; reports (and clears) the first error of the queued commands.
VEDAresult drain(std::unique_lock<std::mutex>& lock) {
    g.cv.wait(lock, [] { return g.pending == 0; });
    if (g.lost) return lost_error();
    VEDAresult e = g.async_error;
    g.async_error = VEDA_SUCCESS;
    return e == VEDA_SUCCESS ? e : fail(e, g.async_detail);
}

// Runs one command and waits for it: for calls whose answer the caller needs now.
VEDAresult run_now(std::unique_lock<std::mutex>& lock, const CommandPtr& c) {
    enqueue(c);
    VEDAresult before = drain(lock);
    if (before != VEDA_SUCCESS) return before;
    return VEDA_SUCCESS;
}

// The range vptr..vptr+n must lie in one live allocation.
VEDAresult check_range(VEDAdeviceptr vptr, uint64_t n, const char* what) {
    auto it = g.blocks.find(vptr_idx(vptr));
    if (vptr_idx(vptr) == 0 || it == g.blocks.end())
        return fail(VEDA_ERROR_UNKNOWN_VPTR, std::string(what) + ": 0x" + [&] {
            char b[32]; snprintf(b, sizeof b, "%llx", (unsigned long long)vptr); return std::string(b); }() +
            " is not a live allocation of the emulated ve:0 (freed, never allocated, or a host pointer)");
    uint64_t off = vptr_offset(vptr);
    if (off > it->second || n > it->second - off)
        return fail(VEDA_ERROR_OUT_OF_BOUNDS, std::string(what) + ": " + std::to_string(n) + " bytes at offset " +
                    std::to_string(off) + " exceed the allocation of " + std::to_string(it->second) + " bytes");
    return VEDA_SUCCESS;
}

#define CHECK(expr) do { VEDAresult _r = (expr); if (_r != VEDA_SUCCESS) return _r; } while (0)

const char* const kErrorNames[] = {
    "VEDA_SUCCESS", "VEDA_ERROR_ALREADY_INITIALIZED", "VEDA_ERROR_CANNOT_CREATE_CONTEXT",
    "VEDA_ERROR_CANNOT_CREATE_DEVICE", "VEDA_ERROR_CANNOT_CREATE_STREAM", "VEDA_ERROR_CANNOT_POP_CONTEXT",
    "VEDA_ERROR_CANT_READ_SENSOR_FILE", "VEDA_ERROR_FUNCTION_NOT_FOUND", "VEDA_ERROR_INITIALIZING_DEVICE",
    "VEDA_ERROR_INVALID_ARGS", "VEDA_ERROR_INVALID_CONTEXT", "VEDA_ERROR_INVALID_COREIDX",
    "VEDA_ERROR_INVALID_DEVICE", "VEDA_ERROR_INVALID_MODULE", "VEDA_ERROR_INVALID_REQID",
    "VEDA_ERROR_INVALID_STREAM", "VEDA_ERROR_INVALID_VALUE", "VEDA_ERROR_MODULE_NOT_FOUND",
    "VEDA_ERROR_NOT_IMPLEMENTED", "VEDA_ERROR_NOT_INITIALIZED", "VEDA_ERROR_NO_DEVICES_FOUND",
    "VEDA_ERROR_NO_SENSOR_FILE", "VEDA_ERROR_OFFSETTED_VPTR_NOT_ALLOWED", "VEDA_ERROR_OUT_OF_BOUNDS",
    "VEDA_ERROR_OUT_OF_MEMORY", "VEDA_ERROR_SHUTTING_DOWN", "VEDA_ERROR_UNABLE_TO_DETECT_DEVICES",
    "VEDA_ERROR_UNKNOWN_CONTEXT", "VEDA_ERROR_UNKNOWN_DEVICE", "VEDA_ERROR_UNKNOWN_KERNEL",
    "VEDA_ERROR_UNKNOWN_MODULE", "VEDA_ERROR_UNKNOWN_PPTR", "VEDA_ERROR_UNKNOWN_ATTRIBUTE",
    "VEDA_ERROR_UNKNOWN_STREAM", "VEDA_ERROR_UNKNOWN_VPTR", "VEDA_ERROR_VEDA_LD_LIBRARY_PATH_NOT_DEFINED",
    "VEDA_ERROR_VEO_COMMAND_ERROR", "VEDA_ERROR_VEO_COMMAND_EXCEPTION", "VEDA_ERROR_VEO_COMMAND_UNFINISHED",
    "VEDA_ERROR_VEO_COMMAND_UNKNOWN_ERROR", "VEDA_ERROR_VEO_STATE_BLOCKED", "VEDA_ERROR_VEO_STATE_RUNNING",
    "VEDA_ERROR_VEO_STATE_SYSCALL", "VEDA_ERROR_VEO_STATE_UNKNOWN", "VEDA_ERROR_VPTR_ALREADY_ALLOCATED",
    "VEDA_ERROR_TODO", "VEDA_ERROR_ASSERT", "VEDA_ERROR_CONTEXT_IS_DESTROYED", "VEDA_ERROR_INVALID_HANDLE",
    "VEDA_ERROR_UNKNOWN", "VEDA_ERROR_INVALID_DTYPE", "VEDA_ERROR_OFFSET_NOT_ALLOWED",
    "VEDA_ERROR_UNKNOWN_HMEM", "VEDA_ERROR_UNKNOWN_CALLBACK", "VEDA_ERROR_CALLBACK_ALREADY_REGISTERED",
    "VEDA_ERROR_MEMORY_MISALIGNED",
};
constexpr int kErrorCount = sizeof kErrorNames / sizeof kErrorNames[0];

const char* error_string(VEDAresult e) {
    switch (e) {
    case VEDA_SUCCESS: return "no error";
    case VEDA_ERROR_OUT_OF_MEMORY: return "out of device memory";
    case VEDA_ERROR_UNKNOWN_VPTR: return "unknown device pointer";
    case VEDA_ERROR_OUT_OF_BOUNDS: return "access outside the allocation";
    case VEDA_ERROR_VEO_COMMAND_EXCEPTION: return "the device process raised an exception";
    case VEDA_ERROR_MODULE_NOT_FOUND: return "module could not be loaded";
    case VEDA_ERROR_FUNCTION_NOT_FOUND: return "function not found in module";
    case VEDA_ERROR_NOT_INITIALIZED: return "VEDA is not initialized";
    case VEDA_ERROR_UNKNOWN_CONTEXT: return "no current context";
    case VEDA_ERROR_INVALID_ARGS: return "invalid kernel arguments";
    default: return "VEDA error (emulated device)";
    }
}

}  // namespace

extern "C" {

// ---- extensions of the emulator (not in NEC's libveda) ----------------------

VEDAresult solVedaEmuLastError(const char** detail) {
    std::lock_guard<std::mutex> lock(g_detail_mutex);
    *detail = g_detail.c_str();
    return VEDA_SUCCESS;
}

VEDAresult solVedaEmuServerPid(int* pid) {
    *pid = g.started ? int(g.pid) : -1;
    return VEDA_SUCCESS;
}

// ---- init, devices, contexts --------------------------------------------------

VEDAresult vedaInit(uint32_t) {
    std::lock_guard<std::mutex> lock(g.m);
    if (g.initialized) return VEDA_ERROR_ALREADY_INITIALIZED;
    g.capacity = parse_bytes(getenv("SOL_VE_EMULATE_MEMORY"), 8ull << 30);
    g.initialized = true;
    return VEDA_SUCCESS;
}

VEDAresult vedaExit(void) {
    if (!g.initialized) return fail(VEDA_ERROR_NOT_INITIALIZED, "vedaInit was not called");
    stop_server();
    g.initialized = false;
    t_contexts.clear();
    return VEDA_SUCCESS;
}

VEDAresult vedaDeviceGetCount(int* count) {
    if (!g.initialized) return fail(VEDA_ERROR_NOT_INITIALIZED, "vedaInit was not called");
    *count = 1;
    return VEDA_SUCCESS;
}

VEDAresult vedaDeviceGet(VEDAdevice* device, int ordinal) {
    if (!g.initialized) return fail(VEDA_ERROR_NOT_INITIALIZED, "vedaInit was not called");
    if (ordinal != 0) return fail(VEDA_ERROR_INVALID_DEVICE, "the emulator has one device, ve:0");
    *device = 0;
    return VEDA_SUCCESS;
}

VEDAresult vedaDeviceGetName(char* name, int len, VEDAdevice dev) {
    if (dev != 0) return fail(VEDA_ERROR_INVALID_DEVICE, "the emulator has one device, ve:0");
    if (len > 0) snprintf(name, size_t(len), "%s", kName);
    return VEDA_SUCCESS;
}

VEDAresult vedaDeviceGetAttribute(int* value, int attribute, VEDAdevice dev) {
    if (dev != 0) return fail(VEDA_ERROR_INVALID_DEVICE, "the emulator has one device, ve:0");
    // A Type 20B's numbers, so code that sizes work by them behaves as on a VE.
    static const int kAttributes[] = {1600000, 1400000, 8, 1600000, 32, 32, 256, 16384, 101, 2, 0, 2};
    if (attribute < 0 || attribute >= int(sizeof kAttributes / sizeof kAttributes[0]))
        return fail(VEDA_ERROR_UNKNOWN_ATTRIBUTE, "unknown attribute " + std::to_string(attribute));
    *value = kAttributes[attribute];
    return VEDA_SUCCESS;
}

VEDAresult vedaDeviceTotalMem(size_t* bytes, VEDAdevice dev) {
    if (dev != 0) return fail(VEDA_ERROR_INVALID_DEVICE, "the emulator has one device, ve:0");
    if (!g.initialized) return fail(VEDA_ERROR_NOT_INITIALIZED, "vedaInit was not called");
    *bytes = g.capacity;
    return VEDA_SUCCESS;
}

VEDAresult vedaMemGetInfo(size_t* free_bytes, size_t* total) {
    std::lock_guard<std::mutex> lock(g.m);
    if (!g.initialized) return fail(VEDA_ERROR_NOT_INITIALIZED, "vedaInit was not called");
    *free_bytes = g.capacity - g.used;
    *total = g.capacity;
    return VEDA_SUCCESS;
}

VEDAresult vedaDevicePrimaryCtxRetain(VEDAcontext* ctx, VEDAdevice dev) {
    std::lock_guard<std::mutex> lock(g.m);
    if (!g.initialized) return fail(VEDA_ERROR_NOT_INITIALIZED, "vedaInit was not called");
    if (dev != 0) return fail(VEDA_ERROR_INVALID_DEVICE, "the emulator has one device, ve:0");
    if (!g.started) CHECK(start_server());
    *ctx = &g.context;
    return VEDA_SUCCESS;
}

VEDAresult vedaDevicePrimaryCtxRelease(VEDAdevice) { return VEDA_SUCCESS; }

VEDAresult vedaCtxPushCurrent(VEDAcontext ctx) {
    if (ctx != &g.context) return fail(VEDA_ERROR_UNKNOWN_CONTEXT, "not a context of the emulator");
    t_contexts.push_back(ctx);
    return VEDA_SUCCESS;
}

VEDAresult vedaCtxSetCurrent(VEDAcontext ctx) {
    if (ctx && ctx != &g.context) return fail(VEDA_ERROR_UNKNOWN_CONTEXT, "not a context of the emulator");
    if (t_contexts.empty()) t_contexts.push_back(ctx);
    else t_contexts.back() = ctx;
    return VEDA_SUCCESS;
}

VEDAresult vedaCtxPopCurrent(VEDAcontext* ctx) {
    if (t_contexts.empty()) return fail(VEDA_ERROR_CANNOT_POP_CONTEXT, "no context to pop");
    if (ctx) *ctx = t_contexts.back();
    t_contexts.pop_back();
    return VEDA_SUCCESS;
}

VEDAresult vedaCtxGetCurrent(VEDAcontext* ctx) {
    *ctx = t_contexts.empty() ? nullptr : t_contexts.back();
    return VEDA_SUCCESS;
}

VEDAresult vedaStreamSynchronize(VEDAstream stream) {
    std::unique_lock<std::mutex> lock(g.m);
    CHECK(ready(stream));
    return drain(lock);
}

VEDAresult vedaCtxSynchronize(void) { return vedaStreamSynchronize(0); }

// ---- memory -------------------------------------------------------------------

VEDAresult vedaMemAllocAsync(VEDAdeviceptr* vptr, size_t size, VEDAstream stream) {
    std::lock_guard<std::mutex> lock(g.m);
    CHECK(ready(stream));
    if (size > g.capacity - g.used)
        return fail(VEDA_ERROR_OUT_OF_MEMORY, "allocating " + std::to_string(size) + " bytes: " +
                    std::to_string(g.capacity - g.used) + " of " + std::to_string(g.capacity) +
                    " bytes are free on the emulated ve:0 (SOL_VE_EMULATE_MEMORY sets its size)");
    if (g.next_idx > (kBitsIdx >> kShiftIdx)) return fail(VEDA_ERROR_OUT_OF_MEMORY, "out of allocation indices");
    uint32_t idx = g.next_idx++;
    g.blocks[idx] = size;
    g.used += size;
    auto c = std::make_shared<Command>();
    c->rq.op = OP_ALLOC;
    c->rq.a = idx;
    c->rq.b = size;
    *vptr = make_vptr(idx);
    return enqueue(c);
}

VEDAresult vedaMemFreeAsync(VEDAdeviceptr vptr, VEDAstream stream) {
    std::lock_guard<std::mutex> lock(g.m);
    CHECK(ready(stream));
    CHECK(check_range(vptr, 0, "vedaMemFreeAsync"));
    if (vptr_offset(vptr) != 0) return fail(VEDA_ERROR_OFFSETTED_VPTR_NOT_ALLOWED, "free needs the allocation's own vptr");
    uint32_t idx = vptr_idx(vptr);
    g.used -= g.blocks[idx];
    g.blocks.erase(idx);
    auto c = std::make_shared<Command>();
    c->rq.op = OP_FREE;
    c->rq.a = idx;
    return enqueue(c);
}

VEDAresult vedaMemcpyHtoDAsync(VEDAdeviceptr dst, const void* src, size_t n, VEDAstream stream) {
    std::lock_guard<std::mutex> lock(g.m);
    CHECK(ready(stream));
    CHECK(check_range(dst, n, "vedaMemcpyHtoDAsync destination"));
    auto c = std::make_shared<Command>();
    c->rq.op = OP_HTOD;
    c->rq.a = dst;
    c->rq.payload = n;
    c->send = n ? src : nullptr;
    return enqueue(c);
}

VEDAresult vedaMemcpyDtoHAsync(void* dst, VEDAdeviceptr src, size_t n, VEDAstream stream) {
    std::lock_guard<std::mutex> lock(g.m);
    CHECK(ready(stream));
    CHECK(check_range(src, n, "vedaMemcpyDtoHAsync source"));
    auto c = std::make_shared<Command>();
    c->rq.op = OP_DTOH;
    c->rq.a = src;
    c->rq.b = n;
    c->receive = dst;
    return enqueue(c);
}

VEDAresult vedaMemcpyDtoDAsync(VEDAdeviceptr dst, VEDAdeviceptr src, size_t n, VEDAstream stream) {
    std::lock_guard<std::mutex> lock(g.m);
    CHECK(ready(stream));
    CHECK(check_range(dst, n, "vedaMemcpyDtoDAsync destination"));
    CHECK(check_range(src, n, "vedaMemcpyDtoDAsync source"));
    auto c = std::make_shared<Command>();
    c->rq.op = OP_DTOD;
    c->rq.a = dst;
    c->rq.b = src;
    c->rq.c = n;
    return enqueue(c);
}

VEDAresult vedaMemAlloc(VEDAdeviceptr* vptr, size_t size) {
    CHECK(vedaMemAllocAsync(vptr, size, 0));
    return vedaStreamSynchronize(0);
}
VEDAresult vedaMemFree(VEDAdeviceptr vptr) {
    CHECK(vedaMemFreeAsync(vptr, 0));
    return vedaStreamSynchronize(0);
}
VEDAresult vedaMemcpyHtoD(VEDAdeviceptr dst, const void* src, size_t n) {
    CHECK(vedaMemcpyHtoDAsync(dst, src, n, 0));
    return vedaStreamSynchronize(0);
}
VEDAresult vedaMemcpyDtoH(void* dst, VEDAdeviceptr src, size_t n) {
    CHECK(vedaMemcpyDtoHAsync(dst, src, n, 0));
    return vedaStreamSynchronize(0);
}
VEDAresult vedaMemcpyDtoD(VEDAdeviceptr dst, VEDAdeviceptr src, size_t n) {
    CHECK(vedaMemcpyDtoDAsync(dst, src, n, 0));
    return vedaStreamSynchronize(0);
}

// The device address behind a vptr (VEDA synchronizes the stream for this too).
VEDAresult vedaMemPtr(void** ptr, VEDAdeviceptr vptr) {
    std::unique_lock<std::mutex> lock(g.m);
    CHECK(ready());
    CHECK(check_range(vptr, 0, "vedaMemPtr"));
    auto c = std::make_shared<Command>();
    c->rq.op = OP_MEMPTR;
    c->rq.a = vptr;
    CHECK(run_now(lock, c));
    *ptr = reinterpret_cast<void*>(c->value);
    return VEDA_SUCCESS;
}

// ---- modules and kernels --------------------------------------------------------

VEDAresult vedaModuleLoad(VEDAmodule* module, const char* path) {
    std::unique_lock<std::mutex> lock(g.m);
    CHECK(ready());
    auto c = std::make_shared<Command>();
    c->rq.op = OP_LOAD;
    c->payload.assign(path, path + strlen(path));
    CHECK(run_now(lock, c));
    *module = new EmuModule{c->value, {}};
    return VEDA_SUCCESS;
}

VEDAresult vedaModuleUnload(VEDAmodule module) {
    std::unique_lock<std::mutex> lock(g.m);
    CHECK(ready());
    if (!module) return fail(VEDA_ERROR_UNKNOWN_MODULE, "null module");
    auto c = std::make_shared<Command>();
    c->rq.op = OP_UNLOAD;
    c->rq.a = module->id;
    CHECK(run_now(lock, c));
    delete module;
    return VEDA_SUCCESS;
}

VEDAresult vedaModuleGetFunction(VEDAfunction* function, VEDAmodule module, const char* name) {
    std::unique_lock<std::mutex> lock(g.m);
    CHECK(ready());
    if (!module) return fail(VEDA_ERROR_UNKNOWN_MODULE, "null module");
    auto c = std::make_shared<Command>();
    c->rq.op = OP_SYMBOL;
    c->rq.a = module->id;
    c->payload.assign(name, name + strlen(name));
    CHECK(run_now(lock, c));
    module->names.emplace_back(name);
    function->ptr = c->value;
    function->kernel = module->names.back().c_str();
    return VEDA_SUCCESS;
}

VEDAresult vedaArgsCreate(VEDAargs* args) {
    *args = new veo_args();
    return VEDA_SUCCESS;
}

VEDAresult vedaArgsDestroy(VEDAargs args) {
    delete args;
    return VEDA_SUCCESS;
}

static VEDAresult set_arg(VEDAargs args, int idx, const EmuArg& arg) {
    if (!args || idx < 0 || idx >= kMaxArgs)
        return fail(VEDA_ERROR_INVALID_ARGS, "argument index " + std::to_string(idx) + " (the emulator takes 0..31)");
    if (size_t(idx) >= args->args.size()) args->args.resize(size_t(idx) + 1);
    args->args[size_t(idx)] = arg;
    args->args[size_t(idx)].set = true;
    return VEDA_SUCCESS;
}

static VEDAresult set_value(VEDAargs args, int idx, uint64_t value) {
    EmuArg a;
    a.value = value;
    return set_arg(args, idx, a);
}

VEDAresult vedaArgsSetI64(VEDAargs a, const int i, const int64_t v) { return set_value(a, i, uint64_t(v)); }
VEDAresult vedaArgsSetU64(VEDAargs a, const int i, const uint64_t v) { return set_value(a, i, v); }
VEDAresult vedaArgsSetI32(VEDAargs a, const int i, const int32_t v) { return set_value(a, i, uint64_t(int64_t(v))); }
VEDAresult vedaArgsSetU32(VEDAargs a, const int i, const uint32_t v) { return set_value(a, i, v); }

VEDAresult vedaArgsSetVPtr(VEDAargs args, const int idx, const VEDAdeviceptr vptr) {
    EmuArg a;
    a.kind = ARG_VPTR;
    a.value = vptr;
    return set_arg(args, idx, a);
}
VEDAresult vedaArgsSetPtr(VEDAargs args, const int idx, const VEDAdeviceptr vptr) { return vedaArgsSetVPtr(args, idx, vptr); }

VEDAresult vedaArgsSetStack(VEDAargs args, const int idx, void* ptr, int intent, const size_t size) {
    if (intent < VEDA_ARGS_INTENT_IN || intent > VEDA_ARGS_INTENT_OUT)
        return fail(VEDA_ERROR_INVALID_VALUE, "unknown intent " + std::to_string(intent));
    EmuArg a;
    a.kind = ARG_STACK;
    a.intent = uint32_t(intent);
    a.host = ptr;
    a.size = size;
    return set_arg(args, idx, a);
}

VEDAresult vedaLaunchKernelEx(VEDAfunction f, VEDAstream stream, VEDAargs args, const int destroy_args, uint64_t* result) {
    std::unique_ptr<veo_args> owned(destroy_args ? args : nullptr);
    std::lock_guard<std::mutex> lock(g.m);
    CHECK(ready(stream));
    if (!f.ptr) return fail(VEDA_ERROR_UNKNOWN_KERNEL, "null function");
    const char* name = f.kernel ? f.kernel : "?";
    auto c = std::make_shared<Command>();
    c->rq.op = OP_LAUNCH;
    c->rq.a = f.ptr;
    c->result = result;
    auto put = [&](const void* p, size_t n) { c->payload.insert(c->payload.end(), (const char*)p, (const char*)p + n); };
    uint64_t name_len = strlen(name), count = args ? args->args.size() : 0;
    put(&name_len, 8);
    put(name, name_len);
    put(&count, 8);
    for (uint64_t i = 0; i < count; ++i) {
        const EmuArg& a = args->args[i];
        if (!a.set) return fail(VEDA_ERROR_INVALID_ARGS, "argument " + std::to_string(i) + " of kernel " + name + " was not set");
        if (a.kind == ARG_VPTR) {
            std::string what = "argument " + std::to_string(i) + " of kernel " + name;
            CHECK(check_range(a.value, 0, what.c_str()));
        }
        LaunchArg w{a.kind, a.intent, a.value, a.size};
        put(&w, sizeof w);
    }
    for (uint64_t i = 0; i < count; ++i) {  // IN data is taken now; OUT data lands at completion
        const EmuArg& a = args->args[i];
        if (a.kind != ARG_STACK) continue;
        if (a.intent != VEDA_ARGS_INTENT_OUT) put(a.host, a.size);
        if (a.intent != VEDA_ARGS_INTENT_IN) c->outs.emplace_back(a.host, a.size);
    }
    return enqueue(c);
}

VEDAresult vedaLaunchKernel(VEDAfunction f, VEDAstream stream, VEDAargs args) {
    return vedaLaunchKernelEx(f, stream, args, 0, nullptr);
}

// ---- errors and versions --------------------------------------------------------

VEDAresult vedaGetErrorName(VEDAresult error, const char** name) {
    if (int(error) < 0 || int(error) >= kErrorCount) {
        *name = "VEDA_ERROR_UNKNOWN";
        return VEDA_ERROR_INVALID_VALUE;
    }
    *name = kErrorNames[error];
    return VEDA_SUCCESS;
}

VEDAresult vedaGetErrorString(VEDAresult error, const char** text) {
    *text = error_string(error);
    return VEDA_SUCCESS;
}

VEDAresult vedaGetVersion(const char** version) {
    *version = "emulated (SOL)";
    return VEDA_SUCCESS;
}

VEDAresult vedaDriverGetVersion(const char** version) { return vedaGetVersion(version); }

}  // extern "C"
