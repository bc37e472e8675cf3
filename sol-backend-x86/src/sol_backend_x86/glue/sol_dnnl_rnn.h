/* SOL's oneDNN glue for recurrent layers: one LSTM / GRU / vanilla RNN layer in one direction as oneDNN's
 * lstm_forward, lbr_gru_forward (linear-before-reset: PyTorch's GRU) or vanilla_rnn_forward (inference).
 *
 * Tensors are PyTorch's, time-major: x [T, N, I], h0/c0 [N, H], y [T, N, H], h_n/c_n [N, H]. The weights
 * (w_ih [G*H, I], w_hh [G*H, H], b_ih/b_hh [G*H], gates in PyTorch's order) are packed once per prepare into
 * oneDNN's plain ldigo/ldgo layout with oneDNN's gate order (GRU: update, reset, output = PyTorch's z, r, n;
 * LSTM and RNN: the same order); the biases are summed where oneDNN has one per gate (the GRU's output gate keeps
 * the recurrent bias apart: oneDNN's fourth "u'" bias). A handle creates one primitive per batch it meets.
 */
#ifndef SOL_DNNL_RNN_H
#define SOL_DNNL_RNN_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SOL_RNN_LSTM = 0, SOL_RNN_GRU = 1, SOL_RNN_TANH = 2, SOL_RNN_RELU = 3 };

typedef struct sol_rnn_desc {
  int32_t mode;     /* SOL_RNN_* */
  int32_t reverse;  /* walk the steps from last to first */
  int64_t steps, input, hidden;
} sol_rnn_desc;

/* NULL when oneDNN rejects the layer (the reason is in sol_rnn_last_error()). */
void* sol_rnn_create(const sol_rnn_desc* desc, int64_t batch);
const char* sol_rnn_last_error(void);
/* Bytes of the packed weights and biases. */
int64_t sol_rnn_packed_bytes(void* handle);
int sol_rnn_pack(void* handle, const float* w_ih, const float* w_hh, const float* b_ih, const float* b_hh, void* packed);
/* c0, c_n: LSTM only (NULL otherwise); y, h_n, c_n may be NULL when nobody reads them. 0 on success. */
int sol_rnn_execute(void* handle, int64_t batch, const float* x, const float* h0, const float* c0, const void* packed,
                    float* y, float* h_n, float* c_n);

#ifdef __cplusplus
}
#endif
#endif
