// SOL's oneDNN glue (see sol_dnnl.h). Compiled once per toolchain, linked into every model library.
#include "sol_dnnl.h"

#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "sol_blas.h"
#include "sol_depthwise.h"
#include "sol_grouped.h"
#include "sol_kernels.h"
#include "sol_winograd.h"

namespace {

using dnnl::memory;
using dt = memory::data_type;

thread_local std::string last_error;

bool backward(int op);  // the training ops (defined below)
bool has_weights(int op) { return op != SOL_DNNL_POOL; }

dnnl::algorithm pool_alg(int alg) {
  switch (alg) {
    case SOL_DNNL_POOL_AVG_INCLUDE_PAD: return dnnl::algorithm::pooling_avg_include_padding;
    case SOL_DNNL_POOL_AVG_EXCLUDE_PAD: return dnnl::algorithm::pooling_avg_exclude_padding;
    default: return dnnl::algorithm::pooling_max;
  }
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The element type a tensor lies in memory as (sol_dnnl_tensor.type).
dt stored(const sol_dnnl_tensor& t) { return t.type == SOL_DNNL_BF16 ? dt::bf16 : dt::f32; }

// Strides of a dense tensor from its memory order (order[0] outermost); by default in its stored type.
memory::desc dense(const sol_dnnl_tensor& t, dt type) {
  memory::dims dims(t.dims, t.dims + t.ndims), strides(t.ndims);
  int64_t step = 1;
  for (int i = t.ndims - 1; i >= 0; --i) {
    strides[t.order[i]] = step;
    step *= t.dims[t.order[i]];
  }
  return memory::desc(dims, type, strides);
}

memory::desc dense(const sol_dnnl_tensor& t) { return dense(t, stored(t)); }

memory::desc any_like(const sol_dnnl_tensor& t, dt type = dt::f32) {
  return memory::desc(memory::dims(t.dims, t.dims + t.ndims), type, memory::format_tag::any);
}

dnnl::algorithm eltwise_alg(int alg) {
  switch (alg) {
    case SOL_DNNL_RELU: return dnnl::algorithm::eltwise_relu;
    case SOL_DNNL_CLIP: return dnnl::algorithm::eltwise_clip;
    case SOL_DNNL_ELU: return dnnl::algorithm::eltwise_elu;
    case SOL_DNNL_GELU_ERF: return dnnl::algorithm::eltwise_gelu_erf;
    case SOL_DNNL_GELU_TANH: return dnnl::algorithm::eltwise_gelu_tanh;
    case SOL_DNNL_LOGISTIC: return dnnl::algorithm::eltwise_logistic;
    case SOL_DNNL_TANH: return dnnl::algorithm::eltwise_tanh;
    case SOL_DNNL_SWISH: return dnnl::algorithm::eltwise_swish;
    case SOL_DNNL_HARDSWISH: return dnnl::algorithm::eltwise_hardswish;
    case SOL_DNNL_HARDSIGMOID: return dnnl::algorithm::eltwise_hardsigmoid;
    case SOL_DNNL_EXP: return dnnl::algorithm::eltwise_exp;
    case SOL_DNNL_SQRT: return dnnl::algorithm::eltwise_sqrt;
    case SOL_DNNL_ABS: return dnnl::algorithm::eltwise_abs;
    default: return dnnl::algorithm::eltwise_linear;
  }
}

dnnl::algorithm binary_alg(int alg) {
  switch (alg) {
    case SOL_DNNL_MUL: return dnnl::algorithm::binary_mul;
    case SOL_DNNL_SUB: return dnnl::algorithm::binary_sub;
    case SOL_DNNL_DIV: return dnnl::algorithm::binary_div;
    case SOL_DNNL_MAX: return dnnl::algorithm::binary_max;
    case SOL_DNNL_MIN: return dnnl::algorithm::binary_min;
    default: return dnnl::algorithm::binary_add;
  }
}

dnnl::primitive_attr attributes(const sol_dnnl_desc& d) {
  dnnl::post_ops ops;
  for (int i = 0; i < d.npost; ++i) {
    const sol_dnnl_post& p = d.post[i];
    if (p.kind == SOL_DNNL_BINARY) {
      ops.append_binary(binary_alg(p.alg), dense(p.src1));
    } else {
      ops.append_eltwise(eltwise_alg(p.alg), p.alpha, p.beta);
    }
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}

// LINEAR_1X1: an inner product's [M, C] x [K, C]^T as a 1x1 convolution over a 1 x M x 1 image with C channels
// (channels-last, so every operand keeps its memory layout). Binary post-op operands of [M or 1, K or 1] become
// [1, K or 1, M or 1, 1]; one of another rank leaves the inner product as it is.
void linear_as_conv(sol_dnnl_desc* d) {
  if (d->op != SOL_DNNL_INNER_PRODUCT || d->algorithm != SOL_DNNL_LINEAR_1X1) return;
  d->algorithm = SOL_DNNL_DIRECT;
  if (d->src.ndims != 2 || d->dst.ndims != 2 || d->weights.ndims != 2) return;
  for (int i = 0; i < d->npost; ++i)
    if (d->post[i].kind == SOL_DNNL_BINARY && d->post[i].src1.ndims > 2) return;
  const int32_t nhwc[] = {0, 2, 3, 1}, plain[] = {0, 1, 2, 3};
  auto image = [&](sol_dnnl_tensor* t, int64_t rows, int64_t channels) {
    const int64_t dims[] = {1, channels, rows, 1};
    sol_dnnl_tensor_set(t, 4, dims, nhwc);
  };
  const int64_t M = d->src.dims[0], C = d->src.dims[1], K = d->dst.dims[1];
  image(&d->src, M, C);
  image(&d->dst, M, K);
  const int64_t w[] = {K, C, 1, 1};
  sol_dnnl_tensor_set(&d->weights, 4, w, plain);
  for (int i = 0; i < d->npost; ++i) {
    sol_dnnl_tensor& t = d->post[i].src1;
    if (d->post[i].kind != SOL_DNNL_BINARY) continue;
    if (t.ndims == 2) image(&t, t.dims[0], t.dims[1]);
    else image(&t, 1, t.ndims == 1 ? t.dims[0] : 1);
  }
  d->op = SOL_DNNL_CONV;
  for (int i = 0; i < 2; ++i) d->stride[i] = 1, d->dilation[i] = 0, d->pad_l[i] = 0, d->pad_r[i] = 0;
}

// LINEAR_MATMUL: an inner product's [M, C] x [K, C]^T as oneDNN's matmul of [M, C] by the weights read as [C, K] (the
// framework's [K, C] with the dims swapped in memory order); the bias becomes [1, K]. Binary post-op operands are
// [M or 1, K or 1] already, as the matmul's dst wants them.
void linear_as_matmul(sol_dnnl_desc* d) {
  if (d->op != SOL_DNNL_INNER_PRODUCT || d->algorithm != SOL_DNNL_LINEAR_MATMUL) return;
  d->algorithm = SOL_DNNL_DIRECT;
  if (d->src.ndims != 2 || d->dst.ndims != 2 || d->weights.ndims != 2) return;
  const int64_t C = d->weights.dims[1], K = d->weights.dims[0];
  const int64_t w[] = {C, K}, b[] = {1, K};
  const int32_t transposed[] = {1, 0}, plain[] = {0, 1};
  sol_dnnl_tensor_set(&d->weights, 2, w, transposed);
  if (d->has_bias) sol_dnnl_tensor_set(&d->bias, 2, b, plain);
  d->op = SOL_DNNL_MATMUL;
}

// The descriptor a call's fill function writes for `batch`, with the glue's rewrites applied.
sol_dnnl_desc describe(sol_dnnl_fill fill, int64_t batch) {
  sol_dnnl_desc d;
  std::memset(&d, 0, sizeof d);
  fill(batch, &d);
  linear_as_conv(&d);
  linear_as_matmul(&d);
  return d;
}

memory::dims spatial(const int64_t* values, int count) { return memory::dims(values, values + count); }

dnnl::stream& cpu_stream_for_glue() {
  // oneDNN's CPU stream is stateless for in-order execution; one per thread keeps it that way.
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

struct Call {
  sol_dnnl_fill fill = nullptr;
  int op = 0;
  bool static_weights = false;
  // The operand type of src and weights (sol_dnnl_desc.precision): f32, or bf16 with fp32 src converted per call
  // and runtime weights (MatMul's second operand) too. Set before the creation primitive is made.
  dt compute = dt::f32;
  bool low() const { return compute != dt::f32; }
  // The type the primitive writes dst in: its stored type in bf16 (with fp32 post-ops), fp32 in an fp32 call (a
  // bf16-stored dst is then converted after the call). A bf16 pool writes bf16, which oneDNN's pooling needs
  // for a bf16 src (an fp32-stored dst is converted after the call: a max of bf16 values is one, exactly).
  dt written(const sol_dnnl_desc& d) const { return low() ? (d.op == SOL_DNNL_POOL ? compute : stored(d.dst)) : dt::f32; }
  std::unique_ptr<sol_kernels::Kernel> own;  // set when the call runs as one of SOL's kernels instead of oneDNN
  memory::desc user_weights;    // the framework's weights as they lie in memory
  memory::desc packed_weights;  // the format the creation primitive chose (static weights)
  std::string impl;
  mutable std::mutex lock;  // guards the per-batch cache (by_batch, batch_format)
  std::map<int64_t, std::pair<dnnl::primitive, sol_dnnl_desc>> by_batch;

  // oneDNN picks the weights format per shape: the best kernel at batch 1 and at batch 16 may want
  // different ones, and forcing the packed (creation-time) format on another batch size can leave
  // only the reference implementation, ~1000x slower. Such batch sizes get their own copy of the
  // weights in their format, reordered from the packed weights and refreshed when those are re-packed.
  std::map<int64_t, memory::desc> batch_format;  // batch -> its weights format, where != packed_weights
  mutable std::mutex copy_lock;                  // guards packs, copies and framework_weights
  std::map<const void*, uint64_t> packs;         // packed-weights buffer -> how often it was (re)packed
  struct Copy {
    uint64_t generation = 0;
    std::vector<char> data;
  };
  std::map<std::pair<int64_t, const void*>, Copy> copies;

  // src_scale (sol_dnnl.h): the weights times the call's factors, per call. fp32: the packed weights times the
  // factor of each float's input channel. bf16: the weights are packed as bf16, so the framework's fp32 weights
  // (kept from sol_dnnl_pack, per packed buffer) are scaled and reordered into the packed format (one rounding of
  // w * s to bf16, where the unfolded model rounds x * s).
  bool src_scale = false;
  int factors_at = 0;  // the factors' index in post_src: after the binary post-ops' operands
  std::vector<int32_t> channel_of;  // per float of the scaled tensor (packed fp32, or the framework's in bf16)
  std::map<const void*, std::vector<float>> framework_weights;  // bf16: packed buffer -> the fp32 weights it holds
  dnnl::reorder pack_scaled;                                     // bf16: fp32 framework weights -> packed bf16
  struct Scaled {
    std::vector<float> floats;
    std::vector<char> packed;
  } scaled;

  // For each element of `format` (the packed weights, or the framework's), the input channel it belongs to: that
  // format's form of a tensor whose every weight is its channel index (oneDNN's formats pad with zeros: channel 0,
  // and the zero weight stays zero).
  void map_channels(const memory::desc& format) {
    const memory::dims dims = user_weights.get_dims();
    memory::dims strides(dims.size(), 1);  // row-major [O][I][k...]: the logical order, whatever the user's is
    for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
    std::vector<float> index(static_cast<size_t>(strides[0] * dims[0]));
    for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<float>(i % strides[0] / strides[1]);
    std::vector<float> mapped(format.get_size() / sizeof(float));
    auto& engine = cpu_engine();
    memory from(memory::desc(dims, memory::data_type::f32, strides), engine, index.data());
    memory to(format, engine, mapped.data());
    dnnl::stream stream(engine);
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
    channel_of.assign(mapped.begin(), mapped.end());
  }

  // The weights times factors[c] for input channel c, in the packed format: what the call runs on instead of
  // scaling its input.
  const void* scale_weights(const void* packed, const float* factors, Scaled& out) const {
    const float* w = static_cast<const float*>(packed);
    if (low()) {
      std::lock_guard<std::mutex> guard(copy_lock);
      w = framework_weights.at(packed).data();
    }
    const size_t count = channel_of.size();
    out.floats.resize(count);
    for (size_t i = 0; i < count; ++i) out.floats[i] = w[i] * factors[channel_of[i]];
    if (!low()) return out.floats.data();
    out.packed.resize(packed_weights.get_size());
    auto& engine = cpu_engine();
    memory from(user_weights, engine, out.floats.data()), to(packed_weights, engine, out.packed.data());
    dnnl::stream stream(engine);
    pack_scaled.execute(stream, from, to);
    stream.wait();
    return out.packed.data();
  }

  // The weights format the primitive for `batch` reads.
  memory::desc weights_format(int64_t batch) const {
    std::lock_guard<std::mutex> guard(lock);
    auto found = batch_format.find(batch);
    return found != batch_format.end() ? found->second : packed_weights;
  }

  // The weights as execute receives them: packed (static weights) or as the graph holds them.
  memory::desc given_weights(int64_t batch, const sol_dnnl_desc& d) const {
    return static_weights ? weights_format(batch) : dense(d.weights, compute);
  }

  // The weights pointer to pass for `batch`: the packed buffer, or this batch size's reordered copy of it.
  const void* weights_for(int64_t batch, const void* packed) {
    if (!static_weights) return packed;
    at(batch);  // creating this batch size's primitive is what finds out its weights format
    const memory::desc format = weights_format(batch);
    if (format == packed_weights) return packed;
    std::lock_guard<std::mutex> guard(copy_lock);
    // find/emplace, not operator[]: that would instantiate std::piecewise_construct, a symbol a
    // deployed static library must not export
    const auto key = std::make_pair(batch, packed);
    auto found = copies.find(key);
    if (found == copies.end()) found = copies.emplace(key, Copy()).first;
    Copy& copy = found->second;
    const auto packed_count = packs.find(packed);
    const uint64_t generation = packed_count == packs.end() ? 0 : packed_count->second;
    if (copy.data.empty() || copy.generation != generation) {
      copy.data.resize(format.get_size());
      auto& engine = cpu_engine();
      memory from(packed_weights, engine, const_cast<void*>(packed));
      memory to(format, engine, copy.data.data());
      dnnl::stream stream(engine);
      dnnl::reorder(from, to).execute(stream, from, to);
      stream.wait();
      copy.generation = generation;
    }
    return copy.data.data();
  }

  // The primitive for one descriptor; static weights are always `any`, so oneDNN can pick its best kernel.
  dnnl::primitive make(const sol_dnnl_desc& d, bool creation, int64_t batch) {
    auto& engine = cpu_engine();
    const dnnl::primitive_attr attr = attributes(d);
    memory::desc src = dense(d.src, compute), dst = backward(d.op) ? dense(d.dst) : dense(d.dst, written(d));
    memory::desc weights = static_weights ? any_like(d.weights, compute) : dense(d.weights, compute);
    memory::desc bias = d.has_bias ? dense(d.bias) : memory::desc();
    const int r = d.src.ndims - 2;
    if (d.op == SOL_DNNL_POOL) {
      dnnl::pooling_forward::primitive_desc pd(engine, dnnl::prop_kind::forward_inference, pool_alg(d.pool_alg), src, dst,
                                               spatial(d.stride, r), spatial(d.kernel, r), spatial(d.dilation, r),
                                               spatial(d.pad_l, r), spatial(d.pad_r, r), attr);
      if (creation) impl = pd.impl_info_str();
      return dnnl::pooling_forward(pd);
    }
    if (d.op == SOL_DNNL_MATMUL) {
      dnnl::matmul::primitive_desc pd(engine, src, weights, bias, dst, attr);
      remember(pd.weights_desc(), pd.impl_info_str(), creation, batch);
      return dnnl::matmul(pd);
    }
    if (d.op == SOL_DNNL_INNER_PRODUCT) {
      dnnl::inner_product_forward::primitive_desc pd(engine, dnnl::prop_kind::forward_inference, src, weights, bias,
                                                     dst, attr);
      remember(pd.weights_desc(), pd.impl_info_str(), creation, batch);
      return dnnl::inner_product_forward(pd);
    }
    if (d.op == SOL_DNNL_DECONV) {
      dnnl::deconvolution_forward::primitive_desc pd(
          engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src, weights, bias, dst,
          spatial(d.stride, r), spatial(d.dilation, r), spatial(d.pad_l, r), spatial(d.pad_r, r), attr);
      remember(pd.weights_desc(), pd.impl_info_str(), creation, batch);
      return dnnl::deconvolution_forward(pd);
    }
    if (d.op == SOL_DNNL_IP_BWD_WEIGHTS || d.op == SOL_DNNL_IP_BWD_DATA) {
      // the inner product's backward primitives, with its forward (training) primitive descriptor as the hint
      dnnl::inner_product_forward::primitive_desc hint(engine, dnnl::prop_kind::forward_training, src, weights,
                                                       memory::desc(), dst, attr);
      if (d.op == SOL_DNNL_IP_BWD_DATA) {
        dnnl::inner_product_backward_data::primitive_desc pd(engine, src, weights, dst, hint, attr);
        remember(pd.weights_desc(), pd.impl_info_str(), creation, batch);
        return dnnl::inner_product_backward_data(pd);
      }
      dnnl::inner_product_backward_weights::primitive_desc pd(engine, src, dense(d.weights), dst, hint, attr);
      if (creation) impl = pd.impl_info_str();
      remember_backward(batch, pd.src_desc(), pd.diff_dst_desc(), pd.diff_weights_desc());
      return dnnl::inner_product_backward_weights(pd);
    }
    if (d.op == SOL_DNNL_CONV_BWD_WEIGHTS || d.op == SOL_DNNL_CONV_BWD_DATA) {
      // backward primitives need the forward (training) primitive descriptor as a hint; the weights' formats
      // are oneDNN's choice, so it can pick its fast (jit/brgemm) kernels. Backward-weights also picks its
      // activations' formats: on AVX2 its jit kernel runs 1.1-1.4x faster on blocked (nChw8c) tensors than
      // on channels-last ones, more than the two reorders into them cost (resnet18's 3x3 layers, batch 16)
      if (d.op == SOL_DNNL_CONV_BWD_WEIGHTS) {
        src = any_like(d.src);
        dst = any_like(d.dst);
      }
      dnnl::convolution_forward::primitive_desc hint(
          engine, dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, any_like(d.weights),
          memory::desc(), dst, spatial(d.stride, r), spatial(d.dilation, r), spatial(d.pad_l, r), spatial(d.pad_r, r),
          attr);  // attributes always passed: the default argument is a static a deployed library must not export
      if (d.op == SOL_DNNL_CONV_BWD_DATA) {
        dnnl::convolution_backward_data::primitive_desc pd(
            engine, dnnl::algorithm::convolution_direct, src, weights, dst, spatial(d.stride, r),
            spatial(d.dilation, r), spatial(d.pad_l, r), spatial(d.pad_r, r), hint, attr);
        remember(pd.weights_desc(), pd.impl_info_str(), creation, batch);
        return dnnl::convolution_backward_data(pd);
      }
      dnnl::convolution_backward_weights::primitive_desc pd(
          engine, dnnl::algorithm::convolution_direct, src, any_like(d.weights), dst, spatial(d.stride, r),
          spatial(d.dilation, r), spatial(d.pad_l, r), spatial(d.pad_r, r), hint, attr);
      if (creation) impl = pd.impl_info_str();
      remember_backward(batch, pd.src_desc(), pd.diff_dst_desc(), pd.diff_weights_desc());
      return dnnl::convolution_backward_weights(pd);
    }
    dnnl::convolution_forward::primitive_desc pd(
        engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, weights, bias, dst,
        spatial(d.stride, r), spatial(d.dilation, r), spatial(d.pad_l, r), spatial(d.pad_r, r), attr);
    remember(pd.weights_desc(), pd.impl_info_str(), creation, batch);
    return dnnl::convolution_forward(pd);
  }

  // *_BWD_WEIGHTS: the formats oneDNN picked per batch for x, dy and dw; where one is not the dense order of the
  // graph's tensor, a buffer in that format (x and dy are reordered into it before, dw out of it after each call)
  struct Formats {
    memory::desc src, dst, weights;
  };
  std::map<int64_t, Formats> backward_formats;
  struct Buffers {
    std::vector<char> src, dst, weights;
  };
  std::map<int64_t, Buffers> backward_buffers;
  std::mutex backward_lock;  // guards backward_buffers and serializes backward calls of this handle

  void remember_backward(int64_t batch, const memory::desc& src, const memory::desc& dst, const memory::desc& weights) {
    backward_formats.erase(batch);  // erase + emplace, not operator[] (see weights_for)
    backward_formats.emplace(batch, Formats{src, dst, weights});
  }

  void remember(const memory::desc& weights, const char* name, bool creation, int64_t batch) {
    if (creation) {
      packed_weights = weights;
      impl = name;
    } else if (static_weights && weights != packed_weights) {
      batch_format.erase(batch);  // erase + emplace, not operator[] (see weights_for)
      batch_format.emplace(batch, weights);
    }
  }

  std::pair<dnnl::primitive, sol_dnnl_desc>& at(int64_t batch) {
    std::lock_guard<std::mutex> guard(lock);
    auto found = by_batch.find(batch);
    if (found != by_batch.end()) return found->second;
    const sol_dnnl_desc d = describe(fill, batch);
    auto made = own ? dnnl::primitive() : make(d, false, batch);  // SOL's kernels need only the shapes
    return by_batch.emplace(batch, std::make_pair(made, d)).first->second;
  }

  // The memory objects of the last batch, kept between calls: building memory descriptors and objects
  // costs ~20 us per call, more than a small convolution. Pointers that changed are swapped in with
  // set_data_handle (activations in the workspace and packed weights rarely move; inputs/outputs do).
  struct Bound {
    int64_t batch = -1;
    dnnl::primitive primitive;
    std::unordered_map<int, memory> args;
    std::vector<std::pair<int, const void*>> pointers;  // (argument, the pointer its memory holds now)
  };
  // An operand whose stored type is not the one the primitive reads (an fp32 src of a bf16 call, a bf16 src of an
  // fp32 call), reordered into a buffer of the primitive's type; or a dst the primitive writes in fp32 into the
  // buffer and that is reordered into its bf16 storage after the call.
  struct Lowered {
    int64_t batch = -1;
    dnnl::reorder convert;
    memory given, low;
    std::vector<char> buffer;
  };
  Lowered low_src, low_weights, low_dst;  // guarded by run_lock like `bound`

  // The copy of the tensor `data` (described by `user`, in its stored type) in the call's type, in `slot`'s buffer,
  // for `batch`.
  const void* lowered(Lowered& slot, int64_t batch, const memory::desc& user, const void* data) {
    prepare_slot(slot, batch, user, compute, data, false);
    slot.given.set_data_handle(const_cast<void*>(data));
    slot.convert.execute(cpu_stream_for_glue(), slot.given, slot.low);
    return slot.buffer.data();
  }

  // Where the primitive writes a dst stored as `user` in another type (`type`): `slot`'s buffer, which
  // `raise_output` then reorders into `data`.
  void* output_buffer(Lowered& slot, int64_t batch, const memory::desc& user, dt type, void* data) {
    prepare_slot(slot, batch, user, type, data, true);
    slot.given.set_data_handle(data);
    return slot.buffer.data();
  }
  static void raise_output(Lowered& slot) { slot.convert.execute(cpu_stream_for_glue(), slot.low, slot.given); }

  // (Re)makes `slot` for `batch`: a buffer like `user` in `type`, and the reorder between the two (into the buffer,
  // or out of it for an output).
  void prepare_slot(Lowered& slot, int64_t batch, const memory::desc& user, dt type, const void* data, bool output) {
    auto& engine = cpu_engine();
    if (slot.batch != batch) {
      memory::desc low(user.get_dims(), type, user.get_strides());
      slot.buffer.resize(low.get_size());
      slot.given = memory(user, engine, const_cast<void*>(data));
      slot.low = memory(low, engine, slot.buffer.data());
      slot.convert = output ? dnnl::reorder(slot.low, slot.given) : dnnl::reorder(slot.given, slot.low);
      slot.batch = batch;
    }
  }
  std::mutex run_lock;  // guards `bound`; a call that finds it taken takes the uncached path
  Bound bound;

  Bound& bind(int64_t batch) {
    if (bound.batch == batch) return bound;
    auto& entry = at(batch);
    const sol_dnnl_desc& d = entry.second;
    auto& engine = cpu_engine();
    Bound fresh;
    fresh.batch = batch;
    fresh.primitive = entry.first;
    auto add = [&](int arg, const memory::desc& md) {
      fresh.args.emplace(arg, memory(md, engine, nullptr));
      fresh.pointers.emplace_back(arg, nullptr);
    };
    add(DNNL_ARG_SRC, dense(d.src, compute));
    if (has_weights(d.op)) add(DNNL_ARG_WEIGHTS, given_weights(batch, d));
    if (d.has_bias) add(DNNL_ARG_BIAS, dense(d.bias));
    add(DNNL_ARG_DST, dense(d.dst, written(d)));
    for (int i = 0; i < d.npost; ++i) {
      if (d.post[i].kind == SOL_DNNL_BINARY) add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1, dense(d.post[i].src1));
    }
    bound = std::move(fresh);
    return bound;
  }
};

// Points each cached memory object at this call's pointer (in the order Call::bind added them).
void rebind(Call::Bound& b, const void* src, const void* weights, const void* bias, const void* const* post_src,
            void* dst) {
  size_t binary = 0;
  for (auto& slot : b.pointers) {
    const void* want;
    switch (slot.first) {
      case DNNL_ARG_SRC: want = src; break;
      case DNNL_ARG_WEIGHTS: want = weights; break;
      case DNNL_ARG_BIAS: want = bias; break;
      case DNNL_ARG_DST: want = dst; break;
      default: want = post_src[binary++]; break;
    }
    if (slot.second != want) {
      b.args.at(slot.first).set_data_handle(const_cast<void*>(want));
      slot.second = want;
    }
  }
}

// SOL's kernel for a forward convolution descriptor, or MKL's for an inner product (sol_blas.h), or null when it
// asks for oneDNN or the kernel cannot run it (see sol_dnnl.h).
std::unique_ptr<sol_kernels::Kernel> own_kernel_for(const sol_dnnl_desc& d) {
  if (d.op == SOL_DNNL_INNER_PRODUCT) return sol_blas::linear_for(d);
  // bf16-stored activations: the bf16 depthwise kernel (SOL's other convolutions compute fp32 tensors)
  if (d.op == SOL_DNNL_CONV && d.algorithm == SOL_DNNL_GROUPED &&
      (d.src.type == SOL_DNNL_BF16 || d.dst.type == SOL_DNNL_BF16))
    return sol_depthwise::Conv::for_desc(d);
  const sol_dnnl_tensor &src = d.src, &dst = d.dst, &w = d.weights;
  const int32_t channels_last[] = {0, 2, 3, 1};
  const bool nhwc = src.ndims == 4 && dst.ndims == 4 && std::equal(src.order, src.order + 4, channels_last) &&
                    std::equal(dst.order, dst.order + 4, channels_last);
  const bool plain_weights = [&] {
    for (int i = 0; i < w.ndims; ++i)
      if (w.order[i] != i) return false;
    return true;
  }();
  if (d.op != SOL_DNNL_CONV || d.algorithm == SOL_DNNL_DIRECT || !d.static_weights || !nhwc || !plain_weights ||
      d.src_scale || src.type != SOL_DNNL_F32 || dst.type != SOL_DNNL_F32 ||
      dst.dims[1] % 8 != 0 || !sol_kernels::avx2_supported())
    return nullptr;
  for (int i = 0; i < 2; ++i)
    if (d.dilation[i] != 0) return nullptr;
  std::vector<sol_kernels::PostOp> post;
  if (!sol_kernels::post_ops_for(d, &post)) return nullptr;
  const int64_t groups = w.ndims == 5 ? w.dims[0] : 1;
  const int64_t* kernel = w.dims + w.ndims - 2;
  if (d.algorithm == SOL_DNNL_GROUPED) {
    if (!sol_grouped::Conv::handles(src.dims[1], dst.dims[1], groups)) return nullptr;
    auto conv = std::make_unique<sol_grouped::Conv>();
    conv->C = src.dims[1], conv->K = dst.dims[1], conv->groups = groups;
    conv->KH = kernel[0], conv->KW = kernel[1], conv->SH = d.stride[0], conv->SW = d.stride[1];
    conv->pad_t = d.pad_l[0], conv->pad_l = d.pad_l[1], conv->pad_b = d.pad_r[0], conv->pad_r = d.pad_r[1];
    conv->has_bias = d.has_bias != 0;
    conv->post = std::move(post);
    return conv;
  }
  const int32_t tiles = d.algorithm & ~SOL_DNNL_SCHEDULE_MASK, schedule = d.algorithm & SOL_DNNL_SCHEDULE_MASK;
  if ((tiles != SOL_DNNL_WINOGRAD && tiles != SOL_DNNL_WINOGRAD_2X2) || groups != 1 ||
      kernel[0] != 3 || kernel[1] != 3 || d.stride[0] != 1 || d.stride[1] != 1)
    return nullptr;
  auto conv = std::make_unique<sol_winograd::Conv>();
  conv->tile = tiles == SOL_DNNL_WINOGRAD_2X2 ? 2 : 4;
  conv->schedule = schedule == SOL_DNNL_WINOGRAD_BLOCKS   ? sol_winograd::Conv::BLOCKS
                   : schedule == SOL_DNNL_WINOGRAD_PHASES ? sol_winograd::Conv::PHASES
                                                          : sol_winograd::Conv::BY_WEIGHT_SIZE;
  conv->K = w.dims[0], conv->C = w.dims[1];
  conv->pad_t = d.pad_l[0], conv->pad_l = d.pad_l[1], conv->pad_b = d.pad_r[0], conv->pad_r = d.pad_r[1];
  conv->has_bias = d.has_bias != 0;
  conv->post = std::move(post);
  return conv;
}

dnnl::stream& cpu_stream() { return cpu_stream_for_glue(); }

}  // namespace

namespace sol_kernels {

bool avx2_supported() {
#if SOL_HAVE_AVX2
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool avx512_supported() {
#if SOL_HAVE_AVX2
  return avx2_supported() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

bool post_ops_for(const sol_dnnl_desc& d, std::vector<PostOp>* out) {
  const int32_t channels_last[] = {0, 2, 3, 1};
  for (int i = 0; i < d.npost; ++i) {
    const sol_dnnl_post& p = d.post[i];
    PostOp op;
    if (p.kind == SOL_DNNL_ELTWISE && (p.alg == SOL_DNNL_RELU || p.alg == SOL_DNNL_CLIP)) {
      op.kind = p.alg == SOL_DNNL_RELU ? PostOp::RELU : PostOp::CLIP;
      op.alpha = p.alpha, op.beta = p.beta;
    } else if (p.kind == SOL_DNNL_BINARY && p.src1.type == SOL_DNNL_F32) {  // SOL's kernels read fp32 operands
      const sol_dnnl_tensor& t = p.src1;
      int64_t elements = 1;
      for (int j = 0; j < t.ndims; ++j) elements *= t.dims[j];
      op.kind = PostOp::BINARY;
      op.alg = p.alg;
      if (elements == 1) {
        op.broadcast = PostOp::SCALAR;
      } else if (t.ndims == 4 && elements == t.dims[1] && t.dims[1] == d.dst.dims[1]) {
        op.broadcast = PostOp::CHANNEL;
      } else if (t.ndims == 4 && std::equal(t.dims, t.dims + 4, d.dst.dims) &&
                 std::equal(t.order, t.order + 4, channels_last)) {
        op.broadcast = PostOp::FULL;
      } else {
        return false;
      }
    } else {
      return false;
    }
    out->push_back(op);
  }
  return true;
}

}  // namespace sol_kernels

extern "C" {

const char* sol_dnnl_last_error(void) { return last_error.c_str(); }

void* sol_dnnl_create(sol_dnnl_fill fill, int64_t batch) {
  try {
    auto call = std::make_unique<Call>();
    const sol_dnnl_desc d = describe(fill, batch);
    call->fill = fill;
    call->op = d.op;
    call->static_weights = d.static_weights != 0;
    if (has_weights(d.op)) call->user_weights = dense(d.weights);
    call->src_scale = d.src_scale != 0;
    for (int i = 0; i < d.npost; ++i) call->factors_at += d.post[i].kind == SOL_DNNL_BINARY;
    if (call->src_scale && (d.op != SOL_DNNL_CONV || !d.static_weights || d.weights.ndims != d.src.ndims ||
                            d.src.dims[0] != 1 || d.algorithm != SOL_DNNL_DIRECT)) {
      last_error = "an input-channel scale needs a forward convolution with static weights, no groups and batch 1";
      return nullptr;
    }
    call->own = own_kernel_for(d);
    if (call->own) {  // no oneDNN primitive: the handle keeps the descriptor for the shapes
      call->impl = call->own->name();
      call->by_batch.emplace(batch, std::make_pair(dnnl::primitive(), d));
      return call.release();
    }
    if (d.precision == SOL_DNNL_BF16 && !backward(d.op)) call->compute = dt::bf16;
    dnnl::primitive made;
    try {
      made = call->make(d, true, batch);
    } catch (const std::exception& e) {
      if (!call->low()) throw;
      // no bf16 implementation for this call (an op or shape oneDNN has only in fp32): it computes in fp32,
      // which is exact, and says so in its implementation name (sol.profile, debug mode)
      call->compute = dt::f32;
      made = call->make(d, true, batch);
      call->impl += " (fp32: no bf16 kernel)";
    }
    call->by_batch.emplace(batch, std::make_pair(made, d));
    return call.release();
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

int64_t sol_dnnl_packed_bytes(void* handle) {
  auto* call = static_cast<Call*>(handle);
  if (call->own) return call->own->packed_floats() * static_cast<int64_t>(sizeof(float));
  return call->static_weights ? static_cast<int64_t>(call->packed_weights.get_size()) : 0;
}

int sol_dnnl_pack(void* handle, const void* weights, void* packed) {
  auto* call = static_cast<Call*>(handle);
  if (call->own) {
    call->own->pack(static_cast<const float*>(weights), static_cast<float*>(packed));
    return 0;
  }
  try {
    auto& engine = cpu_engine();
    memory from(call->user_weights, engine, const_cast<void*>(weights));
    memory to(call->packed_weights, engine, packed);
    dnnl::reorder(from, to).execute(cpu_stream(), from, to);
    cpu_stream().wait();
    if (call->src_scale && call->channel_of.empty()) {  // prepare runs before any call
      call->map_channels(call->low() ? call->user_weights : call->packed_weights);
      if (call->low()) call->pack_scaled = dnnl::reorder(from, to);
    }
    std::lock_guard<std::mutex> guard(call->copy_lock);
    if (call->src_scale && call->low()) {
      const float* w = static_cast<const float*>(weights);
      // find/emplace, not operator[] (see weights_for)
      auto kept = call->framework_weights.find(packed);
      if (kept == call->framework_weights.end())
        kept = call->framework_weights.emplace(packed, std::vector<float>()).first;
      kept->second.assign(w, w + call->user_weights.get_size() / sizeof(float));
    }
    // per-batch copies of these weights are now stale (find/emplace: see weights_for)
    auto count = call->packs.find(packed);
    if (count == call->packs.end()) call->packs.emplace(packed, 1);
    else ++count->second;
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    std::fprintf(stderr, "SOL: oneDNN call failed: %s\n", e.what());
    return 2;
  }
}

}  // extern "C"

namespace {

bool backward_data(int op) { return op == SOL_DNNL_CONV_BWD_DATA || op == SOL_DNNL_IP_BWD_DATA; }
bool backward(int op) { return backward_data(op) || op == SOL_DNNL_CONV_BWD_WEIGHTS || op == SOL_DNNL_IP_BWD_WEIGHTS; }

// The training ops (see sol_dnnl.h): memory objects per call, which costs microseconds against milliseconds.
void execute_backward(Call* call, int64_t batch, const void* a, const void* b, void* out) {
  if (backward_data(call->op)) b = call->weights_for(batch, b);
  auto& entry = call->at(batch);
  const sol_dnnl_desc& d = entry.second;
  auto& engine = cpu_engine();
  std::lock_guard<std::mutex> guard(call->backward_lock);
  std::unordered_map<int, memory> args;
  if (backward_data(call->op)) {
    args.emplace(DNNL_ARG_DIFF_DST, memory(dense(d.dst), engine, const_cast<void*>(a)));
    args.emplace(DNNL_ARG_WEIGHTS, memory(call->given_weights(batch, d), engine, const_cast<void*>(b)));
    args.emplace(DNNL_ARG_DIFF_SRC, memory(dense(d.src), engine, out));
    entry.first.execute(cpu_stream(), args);
    cpu_stream().wait();
    return;
  }
  Call::Formats formats;
  {
    std::lock_guard<std::mutex> lock(call->lock);
    formats = call->backward_formats.find(batch)->second;
  }
  auto found = call->backward_buffers.find(batch);
  if (found == call->backward_buffers.end()) found = call->backward_buffers.emplace(batch, Call::Buffers()).first;
  Call::Buffers& buffers = found->second;
  // the graph's tensor as it lies, or (when oneDNN wants another format) a buffer in that format
  auto operand = [&](const memory::desc& user, const memory::desc& format, const void* data,
                     std::vector<char>& buffer) {
    memory given(user, engine, const_cast<void*>(data));
    if (format == user) return given;
    buffer.resize(format.get_size());
    memory converted(format, engine, buffer.data());
    dnnl::reorder(given, converted).execute(cpu_stream(), given, converted);
    return converted;
  };
  args.emplace(DNNL_ARG_SRC, operand(dense(d.src), formats.src, a, buffers.src));
  args.emplace(DNNL_ARG_DIFF_DST, operand(dense(d.dst), formats.dst, b, buffers.dst));
  // dw straight into the output, or into a buffer in oneDNN's format and reordered into the output after
  const memory::desc user = dense(d.weights);
  memory result(user, engine, out);
  memory grad = result;
  if (formats.weights != user) {
    buffers.weights.resize(formats.weights.get_size());
    grad = memory(formats.weights, engine, buffers.weights.data());
  }
  args.emplace(DNNL_ARG_DIFF_WEIGHTS, grad);
  entry.first.execute(cpu_stream(), args);
  if (formats.weights != user) dnnl::reorder(grad, result).execute(cpu_stream(), grad, result);
  cpu_stream().wait();
}

}  // namespace

extern "C" {

int sol_dnnl_execute(void* handle, int64_t batch, const void* src, const void* weights, const void* bias,
                     const void* const* post_src, void* dst) {
  auto* call = static_cast<Call*>(handle);
  if (call->own) {  // the batch's shapes from its descriptor (filled once per batch size)
    call->own->execute(call->at(batch).second, static_cast<const float*>(src), static_cast<const float*>(weights),
                       static_cast<const float*>(bias), post_src, static_cast<float*>(dst));
    return 0;
  }
  try {
    if (backward(call->op)) {
      execute_backward(call, batch, src, weights, dst);
      return 0;
    }
    weights = call->weights_for(batch, weights);
    const float* factors = nullptr;
    if (call->src_scale) {
      if (batch != 1) throw std::runtime_error("an input-channel scale needs batch 1");
      factors = static_cast<const float*>(post_src[call->factors_at]);
    }
    std::unique_lock<std::mutex> owner(call->run_lock, std::try_to_lock);
    if (owner.owns_lock()) {  // the usual case: one model runs this call at a time
      if (factors) weights = call->scale_weights(weights, factors, call->scaled);
      // operands stored in another type than the call computes in, converted into the handle's buffers (bf16:
      // fp32-stored activations; an fp32 fallback call: bf16-stored ones)
      const sol_dnnl_desc& d = call->at(batch).second;
      if (stored(d.src) != call->compute) src = call->lowered(call->low_src, batch, dense(d.src), src);
      if (has_weights(d.op) && !call->static_weights && stored(d.weights) != call->compute)
        weights = call->lowered(call->low_weights, batch, dense(d.weights), weights);
      const bool raise = stored(d.dst) != call->written(d);
      void* out = raise ? call->output_buffer(call->low_dst, batch, dense(d.dst), call->written(d), dst) : dst;
      Call::Bound& b = call->bind(batch);
      rebind(b, src, weights, bias, post_src, out);
      b.primitive.execute(cpu_stream(), b.args);
      if (raise) Call::raise_output(call->low_dst);
      cpu_stream().wait();
      return 0;
    }
    Call::Scaled scaled;  // this thread's scaled weights (another thread runs the handle's own buffer)
    if (factors) weights = call->scale_weights(weights, factors, scaled);
    auto& entry = call->at(batch);
    const sol_dnnl_desc& d = entry.second;
    auto& engine = cpu_engine();
    Call::Lowered own_src, own_weights, own_dst;  // this thread's converted copies (another thread uses the handle's)
    if (stored(d.src) != call->compute) src = call->lowered(own_src, batch, dense(d.src), src);
    if (has_weights(d.op) && !call->static_weights && stored(d.weights) != call->compute)
      weights = call->lowered(own_weights, batch, dense(d.weights), weights);
    const bool raise = stored(d.dst) != call->written(d);
    void* out = raise ? call->output_buffer(own_dst, batch, dense(d.dst), call->written(d), dst) : dst;
    std::unordered_map<int, memory> args;
    args.emplace(DNNL_ARG_SRC, memory(dense(d.src, call->compute), engine, const_cast<void*>(src)));
    if (has_weights(d.op))
      args.emplace(DNNL_ARG_WEIGHTS, memory(call->given_weights(batch, d), engine, const_cast<void*>(weights)));
    if (d.has_bias) args.emplace(DNNL_ARG_BIAS, memory(dense(d.bias), engine, const_cast<void*>(bias)));
    args.emplace(DNNL_ARG_DST, memory(dense(d.dst, call->written(d)), engine, out));
    for (int i = 0, b = 0; i < d.npost; ++i) {
      if (d.post[i].kind != SOL_DNNL_BINARY) continue;
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1,
                   memory(dense(d.post[i].src1), engine, const_cast<void*>(post_src[b++])));
    }
    entry.first.execute(cpu_stream(), args);
    if (raise) Call::raise_output(own_dst);
    cpu_stream().wait();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    std::fprintf(stderr, "SOL: oneDNN call failed: %s\n", e.what());
    return 2;
  }
}

const char* sol_dnnl_impl(void* handle) { return static_cast<Call*>(handle)->impl.c_str(); }

}  // extern "C"

namespace {

// Which algorithm the timing functions' fill callbacks write (one call is prepared per algorithm in turn).
thread_local int32_t timed_algorithm;

// A float buffer whose data() is 64-byte aligned (moved, never copied: a copy's alignment would differ).
class AlignedFloats {
 public:
  AlignedFloats() = default;
  AlignedFloats(AlignedFloats&&) = default;
  AlignedFloats& operator=(AlignedFloats&&) = default;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  AlignedFloats(int64_t count, float value) : bytes_(static_cast<size_t>(count) * sizeof(float) + 64), count_(count) {
    std::fill(begin(), end(), value);
  }
  float* data() { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(bytes_.data()) + 63) & ~uintptr_t{63}); }
  float* begin() { return data(); }
  float* end() { return data() + count_; }

 private:
  std::vector<char> bytes_;
  int64_t count_ = 0;
};

// A timed descriptor computing in `precision` (SOL_DNNL_BF16: as in a bf16 model, bf16 operands with its activations
// stored as bf16 both sides).
void in_precision(sol_dnnl_desc* d, int32_t precision) {
  if (precision != SOL_DNNL_BF16) return;
  d->precision = SOL_DNNL_BF16;
  d->src.type = d->dst.type = SOL_DNNL_BF16;
}

// One prepared call (and packed weights) per algorithm, timed on arbitrary data in interleaved rounds; seconds[i]
// as sol_dnnl.h says, or -1 when algorithms[i] cannot run the shape.
void time_algorithms(sol_dnnl_fill fill, const int32_t* algorithms, int32_t count, int64_t batch, int64_t x_floats,
                     int64_t w_floats, int64_t b_floats, int64_t y_floats, int32_t runs, double* seconds) {
  // 64-byte aligned, as a model's workspace and packed weights are (sol.codegen.memory.ALIGN): a std::vector's
  // large buffers start 16 bytes past a page, and oneDNN's AMX kernels then ran resnet18's 3x3 layers up to 2x
  // slower than in the model (each row of a tile load spanning two cache lines)
  AlignedFloats x(x_floats, 0.5f), w(w_floats, 0.01f), bias(b_floats, 0.1f), y(y_floats, 0.0f);
  std::vector<std::unique_ptr<Call>> calls(count);
  std::vector<AlignedFloats> packed(count);
  std::vector<std::vector<double>> times(count);
  auto sol_kernel = [](int32_t algorithm) {
    return algorithm != SOL_DNNL_DIRECT && algorithm != SOL_DNNL_LINEAR_1X1 &&
           algorithm != SOL_DNNL_LINEAR_MATMUL;  // LINEAR_BLAS: an own kernel
  };
  for (int32_t a = 0; a < count; ++a) {
    seconds[a] = -1.0;
    timed_algorithm = algorithms[a];
    calls[a].reset(static_cast<Call*>(sol_dnnl_create(fill, batch)));
    // a SOL kernel that cannot run the shape falls back to oneDNN: not what was asked to be timed
    if (calls[a] && sol_kernel(algorithms[a]) && !calls[a]->own)
      calls[a].reset();
    if (!calls[a]) continue;
    packed[a] = AlignedFloats((sol_dnnl_packed_bytes(calls[a].get()) + 64) / 4 + 1, 0.0f);
    if (sol_dnnl_pack(calls[a].get(), w.data(), packed[a].data()) != 0) calls[a].reset();
  }
  // Each timed call starts as inside a model: its input just written by the layer before (in the cache), the
  // weights and everything else evicted by the layers between two inferences. With everything warm, Winograd's
  // larger weights would look free (resnet18's 14x14x256 layer: 1.9x faster than oneDNN warm, slower cold); with
  // the input cold too, oneDNN's direct kernels, which read the input once per tap, looked slower than in a model
  // (DenseNet's 56x56 128 -> 32 layer: 1.76-1.95 ms timed, 1.53-1.59 ms inside densenet121).
  std::vector<char> evict(64 << 20, 1);
  volatile char evicted = 0;  // keeps the eviction reads
  for (int32_t round = 0; round <= runs; ++round) {  // round 0 creates scratch buffers: not counted
    for (int32_t i = 0; i < count; ++i) {
      const int32_t a = (i + round) % count;  // rotated: no algorithm always runs first in a round
      if (!calls[a]) continue;
      // read, not written: dirty lines would be written back to memory during the timed call
      char sum = 0;
      for (size_t at = 0; at < evict.size(); at += 64) sum = static_cast<char>(sum + evict[at]);
      evicted = sum;
      std::fill(x.begin(), x.end(), 0.5f);  // the producer's writes
      const auto start = std::chrono::steady_clock::now();
      if (sol_dnnl_execute(calls[a].get(), batch, x.data(), packed[a].data(), bias.data(), nullptr, y.data()) != 0) {
        calls[a].reset();
        times[a].clear();
        continue;
      }
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      if (round > 0) times[a].push_back(took.count());
    }
  }
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  // Against oneDNN (when timed), each algorithm's time is the median of its per-round ratios to oneDNN's, times
  // oneDNN's median: the two calls of a round ran milliseconds apart, so a slow phase of a shared machine that
  // spans several rounds cancels out of the ratio instead of tipping a close choice.
  const int32_t direct = static_cast<int32_t>(std::find(algorithms, algorithms + count, SOL_DNNL_DIRECT) - algorithms);
  const bool paired = direct < count && calls[direct] && static_cast<int32_t>(times[direct].size()) == runs;
  for (int32_t a = 0; a < count; ++a) {
    if (!calls[a] || times[a].empty()) continue;
    if (!paired || a == direct || static_cast<int32_t>(times[a].size()) != runs) {
      seconds[a] = median(times[a]);
      continue;
    }
    std::vector<double> ratios(runs);
    for (int32_t r = 0; r < runs; ++r) ratios[r] = times[a][r] / times[direct][r];
    seconds[a] = median(ratios) * median(times[direct]);
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void sol_dnnl_time_conv(const int32_t* algorithms, int32_t count,
                                                               const int64_t* shape, int32_t precision, int32_t runs,
                                                               double* seconds) {
  enum { N, H, W, C, K, G, KH, KW, SH, SW, TOP, LEFT, BOTTOM, RIGHT };
  static thread_local int64_t s[SOL_DNNL_SHAPE_DIMS];
  static thread_local int32_t type;
  std::copy(shape, shape + SOL_DNNL_SHAPE_DIMS, s);
  type = precision;
  // the descriptor a generated fill function would write (the shape from the thread-local above)
  sol_dnnl_fill fill = [](int64_t, sol_dnnl_desc* d) {
    const int64_t Ho = (s[H] + s[TOP] + s[BOTTOM] - s[KH]) / s[SH] + 1;
    const int64_t Wo = (s[W] + s[LEFT] + s[RIGHT] - s[KW]) / s[SW] + 1;
    const int64_t src[] = {s[N], s[C], s[H], s[W]}, dst[] = {s[N], s[K], Ho, Wo}, b[] = {s[K]};
    const int64_t dense_w[] = {s[K], s[C], s[KH], s[KW]}, grouped_w[] = {s[G], s[K] / s[G], s[C] / s[G], s[KH], s[KW]};
    const int32_t nhwc[] = {0, 2, 3, 1}, plain[] = {0, 1, 2, 3, 4};
    d->op = SOL_DNNL_CONV, d->algorithm = timed_algorithm, d->static_weights = 1, d->has_bias = 1, d->npost = 0;
    sol_dnnl_tensor_set(&d->src, 4, src, nhwc);
    sol_dnnl_tensor_set(&d->dst, 4, dst, nhwc);
    if (s[G] == 1) sol_dnnl_tensor_set(&d->weights, 4, dense_w, plain);
    else sol_dnnl_tensor_set(&d->weights, 5, grouped_w, plain);
    sol_dnnl_tensor_set(&d->bias, 1, b, plain);
    const int64_t pad_l[] = {s[TOP], s[LEFT]}, pad_r[] = {s[BOTTOM], s[RIGHT]}, stride[] = {s[SH], s[SW]};
    for (int i = 0; i < 2; ++i) d->stride[i] = stride[i], d->dilation[i] = 0, d->pad_l[i] = pad_l[i], d->pad_r[i] = pad_r[i];
    in_precision(d, type);
  };
  const int64_t Ho = (s[H] + s[TOP] + s[BOTTOM] - s[KH]) / s[SH] + 1, Wo = (s[W] + s[LEFT] + s[RIGHT] - s[KW]) / s[SW] + 1;
  time_algorithms(fill, algorithms, count, s[N], s[N] * s[H] * s[W] * s[C], s[K] * s[C] / s[G] * s[KH] * s[KW], s[K],
                  s[N] * Ho * Wo * s[K], runs, seconds);
}

__attribute__((visibility("default"))) void sol_dnnl_time_linear(const int32_t* algorithms, int32_t count,
                                                                 int64_t rows, int64_t in, int64_t out,
                                                                 int32_t precision, int32_t runs, double* seconds) {
  static thread_local int64_t m, c, k;
  static thread_local int32_t type;
  m = rows, c = in, k = out, type = precision;
  sol_dnnl_fill fill = [](int64_t, sol_dnnl_desc* d) {
    const int64_t src[] = {m, c}, w[] = {k, c}, dst[] = {m, k}, b[] = {k};
    const int32_t plain[] = {0, 1};
    d->op = SOL_DNNL_INNER_PRODUCT, d->algorithm = timed_algorithm, d->static_weights = 1, d->has_bias = 1;
    d->npost = 0;
    sol_dnnl_tensor_set(&d->src, 2, src, plain);
    sol_dnnl_tensor_set(&d->weights, 2, w, plain);
    sol_dnnl_tensor_set(&d->dst, 2, dst, plain);
    sol_dnnl_tensor_set(&d->bias, 1, b, plain);
    in_precision(d, type);
  };
  time_algorithms(fill, algorithms, count, m, m * c, k * c, k, m * k, runs, seconds);
}

}  // extern "C"
