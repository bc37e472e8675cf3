// SOL's oneDNN glue for recurrent layers (see sol_dnnl_rnn.h).
#include "sol_dnnl_rnn.h"

#include <dnnl.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

thread_local std::string rnn_error;

dnnl::engine& rnn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& rnn_stream() {
  thread_local dnnl::stream stream(rnn_engine());
  return stream;
}

int gates_of(int mode) { return mode == SOL_RNN_LSTM ? 4 : mode == SOL_RNN_GRU ? 3 : 1; }
// oneDNN's LBR GRU has a fourth bias: the recurrent bias of the output gate, applied before the reset gate
int bias_gates_of(int mode) { return mode == SOL_RNN_GRU ? 4 : gates_of(mode); }
// oneDNN gate k is PyTorch gate source_gate(k): the GRU's update/reset are PyTorch's z/r (swapped)
int source_gate(int mode, int k) { return mode == SOL_RNN_GRU && k < 2 ? 1 - k : k; }

struct Rnn {
  sol_rnn_desc d{};
  std::mutex lock;
  std::map<int64_t, std::shared_ptr<dnnl::primitive>> primitives;  // per batch

  int64_t layer_floats() const { return d.input * gates_of(d.mode) * d.hidden; }
  int64_t iter_floats() const { return d.hidden * gates_of(d.mode) * d.hidden; }
  int64_t bias_floats() const { return bias_gates_of(d.mode) * d.hidden; }

  std::shared_ptr<dnnl::primitive> primitive(int64_t batch) {
    std::lock_guard<std::mutex> guard(lock);
    auto found = primitives.find(batch);
    if (found != primitives.end()) return found->second;
    const int64_t T = d.steps, I = d.input, H = d.hidden, G = gates_of(d.mode);
    memory::desc src({T, batch, I}, dt::f32, tag::tnc), dst({T, batch, H}, dt::f32, tag::tnc);
    memory::desc state({1, 1, batch, H}, dt::f32, tag::ldnc);
    memory::desc w_layer({1, 1, I, G, H}, dt::f32, tag::ldigo), w_iter({1, 1, H, G, H}, dt::f32, tag::ldigo);
    memory::desc bias({1, 1, bias_gates_of(d.mode), H}, dt::f32, tag::ldgo);
    auto direction = d.reverse ? dnnl::rnn_direction::unidirectional_right2left
                               : dnnl::rnn_direction::unidirectional_left2right;
    auto prop = dnnl::prop_kind::forward_inference;
    std::shared_ptr<dnnl::primitive> made;
    if (d.mode == SOL_RNN_LSTM) {
      dnnl::lstm_forward::primitive_desc pd(rnn_engine(), prop, direction, src, state, state, w_layer, w_iter,
                                            memory::desc(), memory::desc(), bias, dst, state, state);
      made = std::make_shared<dnnl::lstm_forward>(pd);
    } else if (d.mode == SOL_RNN_GRU) {
      dnnl::lbr_gru_forward::primitive_desc pd(rnn_engine(), prop, direction, src, state, w_layer, w_iter, bias, dst,
                                               state);
      made = std::make_shared<dnnl::lbr_gru_forward>(pd);
    } else {
      auto activation = d.mode == SOL_RNN_TANH ? dnnl::algorithm::eltwise_tanh : dnnl::algorithm::eltwise_relu;
      dnnl::vanilla_rnn_forward::primitive_desc pd(rnn_engine(), prop, activation, direction, src, state, w_layer,
                                                   w_iter, bias, dst, state);
      made = std::make_shared<dnnl::vanilla_rnn_forward>(pd);
    }
    primitives[batch] = made;
    return made;
  }
};

}  // namespace

extern "C" {

const char* sol_rnn_last_error(void) { return rnn_error.c_str(); }

void* sol_rnn_create(const sol_rnn_desc* desc, int64_t batch) {
  try {
    auto rnn = std::make_unique<Rnn>();
    rnn->d = *desc;
    rnn->primitive(batch);  // oneDNN rejects unsupported layers here, at init, not in the first call
    return rnn.release();
  } catch (const dnnl::error& e) {
    rnn_error = e.what();
  } catch (const std::exception& e) {
    rnn_error = e.what();
  }
  return nullptr;
}

int64_t sol_rnn_packed_bytes(void* handle) {
  auto* rnn = static_cast<Rnn*>(handle);
  return (rnn->layer_floats() + rnn->iter_floats() + rnn->bias_floats()) * (int64_t)sizeof(float);
}

int sol_rnn_pack(void* handle, const float* w_ih, const float* w_hh, const float* b_ih, const float* b_hh,
                 void* packed) {
  auto* rnn = static_cast<Rnn*>(handle);
  const sol_rnn_desc& d = rnn->d;
  const int64_t I = d.input, H = d.hidden, G = gates_of(d.mode);
  float* layer = static_cast<float*>(packed);
  float* iter = layer + rnn->layer_floats();
  float* bias = iter + rnn->iter_floats();
  // ldigo: [input][gate][unit], from PyTorch's [gate * H + unit][input]
  for (int64_t g = 0; g < G; ++g) {
    const int64_t from = source_gate(d.mode, (int)g) * H;
    for (int64_t u = 0; u < H; ++u) {
      for (int64_t i = 0; i < I; ++i) layer[(i * G + g) * H + u] = w_ih[(from + u) * I + i];
      for (int64_t k = 0; k < H; ++k) iter[(k * G + g) * H + u] = w_hh[(from + u) * H + k];
      // the input and recurrent biases add up, except the GRU's output gate: b_in here, b_hn in gate 3
      const bool apart = d.mode == SOL_RNN_GRU && g == 2;
      bias[g * H + u] = b_ih[from + u] + (apart ? 0.0f : b_hh[from + u]);
    }
  }
  if (d.mode == SOL_RNN_GRU) std::memcpy(bias + 3 * H, b_hh + 2 * H, sizeof(float) * H);
  return 0;
}

int sol_rnn_execute(void* handle, int64_t batch, const float* x, const float* h0, const float* c0, const void* packed,
                    float* y, float* h_n, float* c_n) {
  try {
    auto* rnn = static_cast<Rnn*>(handle);
    const sol_rnn_desc& d = rnn->d;
    auto primitive = rnn->primitive(batch);
    const int64_t T = d.steps, I = d.input, H = d.hidden, G = gates_of(d.mode);
    auto& engine = rnn_engine();
    std::vector<float> sequence, last, last_c;  // scratch for outputs nobody reads (oneDNN writes them all)
    if (!y) { sequence.resize(T * batch * H); y = sequence.data(); }
    if (!h_n) { last.resize(batch * H); h_n = last.data(); }
    if (d.mode == SOL_RNN_LSTM && !c_n) { last_c.resize(batch * H); c_n = last_c.data(); }
    auto* layer = const_cast<float*>(static_cast<const float*>(packed));
    float* iter = layer + rnn->layer_floats();
    float* bias = iter + rnn->iter_floats();
    memory::desc state({1, 1, batch, H}, dt::f32, tag::ldnc);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC_LAYER, memory({{T, batch, I}, dt::f32, tag::tnc}, engine, const_cast<float*>(x))},
        {DNNL_ARG_SRC_ITER, memory(state, engine, const_cast<float*>(h0))},
        {DNNL_ARG_WEIGHTS_LAYER, memory({{1, 1, I, G, H}, dt::f32, tag::ldigo}, engine, layer)},
        {DNNL_ARG_WEIGHTS_ITER, memory({{1, 1, H, G, H}, dt::f32, tag::ldigo}, engine, iter)},
        {DNNL_ARG_BIAS, memory({{1, 1, bias_gates_of(d.mode), H}, dt::f32, tag::ldgo}, engine, bias)},
        {DNNL_ARG_DST_LAYER, memory({{T, batch, H}, dt::f32, tag::tnc}, engine, y)},
        {DNNL_ARG_DST_ITER, memory(state, engine, h_n)},
    };
    if (d.mode == SOL_RNN_LSTM) {
      args.insert({DNNL_ARG_SRC_ITER_C, memory(state, engine, const_cast<float*>(c0))});
      args.insert({DNNL_ARG_DST_ITER_C, memory(state, engine, c_n)});
    }
    primitive->execute(rnn_stream(), args);
    rnn_stream().wait();
    return 0;
  } catch (const dnnl::error& e) {
    rnn_error = e.what();
  } catch (const std::exception& e) {
    rnn_error = e.what();
  }
  return 1;
}

}  // extern "C"
