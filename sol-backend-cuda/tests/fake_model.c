/* A model library with the CUDA flavour's ABI, for tests of the runtime without a GPU: forward copies input 0
 * times params[0][0] plus the derived value into output 0 and records what it got. */
#include <stdint.h>
#include <string.h>

static int status_word = 0;
static void* seen_stream = (void*)-1;
static void* seen_stream_status = (void*)-1;
static int64_t seen_batch = -1;
static int seen_math = -1;
static int calls = 0;

void fake_set_status(int s) { status_word = s; }
void* fake_seen_stream(void) { return seen_stream; }
void* fake_seen_status_stream(void) { return seen_stream_status; }
int64_t fake_seen_batch(void) { return seen_batch; }
int fake_seen_math(void) { return seen_math; }
int fake_calls(void) { return calls; }

int sol_m_init(int device) { (void)device; return 0; }
void sol_m_seed(int seed) { (void)seed; }
int64_t sol_m_workspace_size(int64_t batch) { return batch * 16; }
int64_t sol_m_derived_size(void) { return sizeof(float); }
int sol_m_prepare(void* ctx, const void** params, int64_t batch, void* stream, int fp32_math) {
  (void)batch; seen_stream = stream; seen_math = fp32_math;
  *(float*)ctx = 1.0f + ((const float*)params[0])[0];  /* derived = 1 + w */
  return 0;
}
int sol_m_forward(void* ctx, const void** inputs, const void** params, void** outputs, void* workspace,
                  int64_t batch, void* stream, int fp32_math) {
  (void)workspace; calls++; seen_stream = stream; seen_batch = batch; seen_math = fp32_math;
  if (batch > 1000) return 2;  /* "a launch failed" for absurd batches */
  const float* x = (const float*)inputs[0];
  const float w = ((const float*)params[0])[0], d = *(const float*)ctx;
  float* y = (float*)outputs[0];
  for (int64_t i = 0; i < batch * 4; ++i) y[i] = x[i] * w + d;
  return 0;
}
int sol_m_status(void* stream) { int s = status_word; status_word = 0; seen_stream_status = stream; return s; }
