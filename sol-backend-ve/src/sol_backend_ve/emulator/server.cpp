// The emulated VE: a separate process that owns "device memory" and runs
// kernels.  It is started by the emulated libveda with fork+exec, so its
// address space shares nothing with the user's process: a host pointer that
// reaches a kernel points at nothing here and faults, as it would on a VE.
//
// Usage: ve-emulator-server <socket fd>   (the client accounts capacity)
#include "protocol.h"

#include <atomic>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

using namespace vemu;

namespace {

int g_fd = -1;

struct Block {
    char* ptr;
    uint64_t size;
};
std::unordered_map<uint32_t, Block> g_blocks;
std::unordered_map<uint64_t, void*> g_modules;           // handle id -> dlopen handle
struct KernelInfo {
    std::string name;
    uint64_t module;
};
std::unordered_map<uint64_t, KernelInfo> g_kernels;     // address -> launchable kernel
uint64_t g_next_module = 1;

// Read by the signal handler: a fixed buffer, no allocation there.
char g_running_kernel[256] = "";

// ---- replies --------------------------------------------------------------

bool reply(int32_t status, uint64_t value, const void* data = nullptr, uint64_t n = 0) {
    Reply r{status, 0, value, n};
    return write_all(g_fd, &r, sizeof r) && (n == 0 || write_all(g_fd, data, n));
}

bool reply_error(VEDAresult code, const std::string& message) {
    return reply(code, 0, message.data(), message.size());
}

// ---- fault reporting --------------------------------------------------------
// Async-signal-safe: fixed buffers, write(2), _exit(2).

size_t append(char* buf, size_t at, size_t cap, const char* s) {
    while (*s && at + 1 < cap) buf[at++] = *s++;
    return at;
}

size_t append_hex(char* buf, size_t at, size_t cap, uint64_t v) {
    char digits[19] = "0x";
    int n = 2;
    bool started = false;
    for (int shift = 60; shift >= 0; shift -= 4) {
        int d = int((v >> shift) & 0xF);
        if (d || started || shift == 0) {
            digits[n++] = "0123456789abcdef"[d];
            started = true;
        }
    }
    digits[n] = 0;
    return append(buf, at, cap, digits);
}

// Several OpenMP threads of one kernel fault at once when a host pointer reaches it: only the first reports
// (two interleaved replies would garble the message); the others wait for the process to end.
std::atomic<int> g_faulted{0};

void on_fault(int sig, siginfo_t* info, void*) {
    if (g_faulted.exchange(1)) {
        for (;;) pause();
    }
    char msg[512];
    size_t n = 0;
    const char* kernel = g_running_kernel[0] ? g_running_kernel : "(none; the emulator itself)";
    n = append(msg, n, sizeof msg, "kernel ");
    n = append(msg, n, sizeof msg, kernel);
    if (sig == SIGSEGV || sig == SIGBUS) {
        n = append(msg, n, sizeof msg, " accessed address ");
        n = append_hex(msg, n, sizeof msg, uint64_t(info->si_addr));
        n = append(msg, n, sizeof msg,
                   " which is not memory of the emulated ve:0 (a host pointer or a freed/out-of-range "
                   "device pointer reached the device; pass device memory, e.g. vedaMemPtr of a live allocation)");
    } else {
        n = append(msg, n, sizeof msg, sig == SIGFPE ? " raised SIGFPE (arithmetic fault)" :
                                       sig == SIGILL ? " raised SIGILL (illegal instruction)" :
                                                       " aborted (SIGABRT)");
        n = append(msg, n, sizeof msg, " on the emulated ve:0");
    }
    Reply r{kStatusFatal, 0, 0, n};
    // One write each; the main thread is inside the kernel, not writing.
    (void)!::write(g_fd, &r, sizeof r);
    (void)!::write(g_fd, msg, n);
    _exit(128 + sig);
}

void install_fault_handlers() {
    // The kernel may have overflowed its stack: handle on a separate one.
    static char alt[64 * 1024];
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa{};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

// ---- memory ---------------------------------------------------------------

// The server address of vptr..vptr+n, or null when that is not inside one live allocation.
char* resolve(uint64_t vptr, uint64_t n, std::string* why) {
    auto it = g_blocks.find(vptr_idx(vptr));
    uint64_t off = vptr_offset(vptr);
    if (it == g_blocks.end()) {
        *why = "vptr is not a live allocation of the emulated ve:0";
        return nullptr;
    }
    if (off > it->second.size || n > it->second.size - off) {
        *why = "range is outside its allocation on the emulated ve:0";
        return nullptr;
    }
    return it->second.ptr + off;
}

// Discard a payload we will not use, so the stream stays in step.
bool skip(uint64_t n) {
    char buf[65536];
    while (n) {
        uint64_t k = n < sizeof buf ? n : sizeof buf;
        if (!read_all(g_fd, buf, k)) return false;
        n -= k;
    }
    return true;
}

bool read_string(uint64_t n, std::string* out) {
    out->resize(n);
    return n == 0 || read_all(g_fd, &(*out)[0], n);
}

// ---- kernels --------------------------------------------------------------

// Kernels take pointer/integer arguments only, which the x86-64 SysV ABI
// passes in integer registers and then 8-byte stack slots; calling through a
// 32-argument prototype therefore delivers the first N correctly, and the
// caller pops the unused rest.
using Kernel = uint64_t (*)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                            uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                            uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                            uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);

bool launch(const Request& rq) {
    std::vector<char> payload(rq.payload);
    if (rq.payload && !read_all(g_fd, payload.data(), rq.payload)) return false;
    const char* p = payload.data();
    const char* end = p + payload.size();
    auto take = [&](void* dst, size_t n) {
        if (size_t(end - p) < n) return false;
        memcpy(dst, p, n);
        p += n;
        return true;
    };
    uint64_t name_len = 0, count = 0;
    std::string name;
    if (!take(&name_len, 8) || size_t(end - p) < name_len) return reply_error(VEDA_ERROR_INVALID_ARGS, "malformed launch");
    name.assign(p, name_len);
    p += name_len;
    if (!take(&count, 8) || count > kMaxArgs) return reply_error(VEDA_ERROR_INVALID_ARGS, "too many kernel arguments (at most 32)");
    std::vector<LaunchArg> args(count);
    if (count && !take(args.data(), count * sizeof(LaunchArg))) return reply_error(VEDA_ERROR_INVALID_ARGS, "malformed launch");

    auto kernel = g_kernels.find(rq.a);
    if (kernel == g_kernels.end())
        return reply_error(VEDA_ERROR_UNKNOWN_KERNEL, "kernel " + name + " is not a function of a loaded module");

    uint64_t values[kMaxArgs] = {};
    std::vector<std::vector<char>> stacks(count);  // server copies of stack arguments
    for (uint64_t i = 0; i < count; ++i) {
        const LaunchArg& a = args[i];
        if (a.kind == ARG_VALUE) {
            values[i] = a.value;
        } else if (a.kind == ARG_VPTR) {
            std::string why;
            char* at = resolve(a.value, 0, &why);
            if (!at) return reply_error(VEDA_ERROR_UNKNOWN_VPTR, "argument " + std::to_string(i) + " of kernel " + name + ": " + why);
            values[i] = uint64_t(at);
        } else {
            stacks[i].resize(a.size ? a.size : 1);
            if (a.intent != VEDA_ARGS_INTENT_OUT && !take(stacks[i].data(), a.size))
                return reply_error(VEDA_ERROR_INVALID_ARGS, "malformed launch");
            values[i] = uint64_t(stacks[i].data());
        }
    }

    snprintf(g_running_kernel, sizeof g_running_kernel, "%s", name.c_str());
    auto fn = reinterpret_cast<Kernel>(rq.a);
    uint64_t result = fn(values[0], values[1], values[2], values[3], values[4], values[5], values[6], values[7],
                         values[8], values[9], values[10], values[11], values[12], values[13], values[14], values[15],
                         values[16], values[17], values[18], values[19], values[20], values[21], values[22], values[23],
                         values[24], values[25], values[26], values[27], values[28], values[29], values[30], values[31]);
    g_running_kernel[0] = 0;

    std::vector<char> out;  // OUT/INOUT stack arguments travel back, in order
    for (uint64_t i = 0; i < count; ++i)
        if (args[i].kind == ARG_STACK && args[i].intent != VEDA_ARGS_INTENT_IN)
            out.insert(out.end(), stacks[i].begin(), stacks[i].begin() + args[i].size);
    return reply(VEDA_SUCCESS, result, out.data(), out.size());
}

// One request; false when the connection is gone.
bool serve(const Request& rq) {
    std::string why, text;
    switch (rq.op) {
    case OP_ALLOC: {  // a: idx, b: bytes
        if (g_blocks.count(uint32_t(rq.a))) return reply_error(VEDA_ERROR_VPTR_ALREADY_ALLOCATED, "allocation index in use");
        char* p = static_cast<char*>(malloc(rq.b ? rq.b : 1));
        if (!p) return reply_error(VEDA_ERROR_OUT_OF_MEMORY, "the emulator's process could not allocate " + std::to_string(rq.b) + " bytes");
        g_blocks[uint32_t(rq.a)] = {p, rq.b};
        return reply(VEDA_SUCCESS, 0);
    }
    case OP_FREE: {  // a: idx
        auto it = g_blocks.find(uint32_t(rq.a));
        if (it == g_blocks.end()) return reply_error(VEDA_ERROR_UNKNOWN_VPTR, "free of an unknown allocation");
        free(it->second.ptr);
        g_blocks.erase(it);
        return reply(VEDA_SUCCESS, 0);
    }
    case OP_HTOD: {  // a: vptr, payload: the bytes
        char* dst = resolve(rq.a, rq.payload, &why);
        if (!dst) return skip(rq.payload) && reply_error(VEDA_ERROR_OUT_OF_BOUNDS, why);
        return read_all(g_fd, dst, rq.payload) && reply(VEDA_SUCCESS, 0);
    }
    case OP_DTOH: {  // a: vptr, b: bytes
        char* src = resolve(rq.a, rq.b, &why);
        if (!src) return reply_error(VEDA_ERROR_OUT_OF_BOUNDS, why);
        return reply(VEDA_SUCCESS, 0, src, rq.b);
    }
    case OP_DTOD: {  // a: dst vptr, b: src vptr, c: bytes
        char* dst = resolve(rq.a, rq.c, &why);
        char* src = dst ? resolve(rq.b, rq.c, &why) : nullptr;
        if (!src) return reply_error(VEDA_ERROR_OUT_OF_BOUNDS, why);
        memmove(dst, src, rq.c);
        return reply(VEDA_SUCCESS, 0);
    }
    case OP_MEMPTR: {  // a: vptr
        char* at = resolve(rq.a, 0, &why);
        if (!at) return reply_error(VEDA_ERROR_UNKNOWN_VPTR, why);
        return reply(VEDA_SUCCESS, uint64_t(at));
    }
    case OP_LOAD: {  // payload: path
        if (!read_string(rq.payload, &text)) return false;
        void* handle = dlopen(text.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle) return reply_error(VEDA_ERROR_MODULE_NOT_FOUND, dlerror());
        g_modules[g_next_module] = handle;
        return reply(VEDA_SUCCESS, g_next_module++);
    }
    case OP_UNLOAD: {  // a: module id
        auto it = g_modules.find(rq.a);
        if (it == g_modules.end()) return reply_error(VEDA_ERROR_UNKNOWN_MODULE, "unknown module");
        for (auto k = g_kernels.begin(); k != g_kernels.end();)  // its kernels are no longer launchable
            k = k->second.module == rq.a ? g_kernels.erase(k) : std::next(k);
        dlclose(it->second);
        g_modules.erase(it);
        return reply(VEDA_SUCCESS, 0);
    }
    case OP_SYMBOL: {  // a: module id, payload: name
        if (!read_string(rq.payload, &text)) return false;
        auto it = g_modules.find(rq.a);
        if (it == g_modules.end()) return reply_error(VEDA_ERROR_UNKNOWN_MODULE, "unknown module");
        void* fn = dlsym(it->second, text.c_str());
        if (!fn) return reply_error(VEDA_ERROR_FUNCTION_NOT_FOUND, "no function " + text + " in the module (is it extern \"C\"?)");
        g_kernels[uint64_t(fn)] = {text, rq.a};
        return reply(VEDA_SUCCESS, uint64_t(fn));
    }
    case OP_LAUNCH:
        return launch(rq);
    case OP_QUIT:
        reply(VEDA_SUCCESS, 0);
        return false;
    default:
        return skip(rq.payload) && reply_error(VEDA_ERROR_NOT_IMPLEMENTED, "unknown request");
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "ve-emulator-server: started by the emulated libveda, not by hand\n");
        return 2;
    }
    g_fd = atoi(argv[1]);
    install_fault_handlers();
    Request rq;
    while (read_all(g_fd, &rq, sizeof rq))
        if (!serve(rq)) break;
    return 0;
}
