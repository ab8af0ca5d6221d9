/**
 * @file kiln_plugin.h
 * @brief kiln's plugin C ABI: the only thing that crosses between the host and a plugin `.so`.
 *
 * A plugin exports exactly one symbol, `kiln_plugin_get_descriptor`, returning a const descriptor
 * that lists one or more *components* (a model, a reasoning parser, a tool-call parser). Only C
 * types cross: no exceptions, no owned STL containers; whoever allocates frees. Every struct starts
 * with `struct_size` and ends with reserved space so it can grow without breaking older binaries:
 * the side that allocates a struct sets its size, the other side reads or writes only the fields
 * that fit in it (KILN_FITS). The negotiation rules are written down in sdk/ABI.md.
 *
 * Plugin authors normally do not use this header directly: `kiln/plugin.hpp` adapts C++ classes.
 */
#ifndef KILN_PLUGIN_H
#define KILN_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** ABI version. Major: incompatible change. Minor: additions only (new ops, fields, entries). */
#define KILN_ABI_MAJOR 2
#define KILN_ABI_MINOR 3

#if defined(_WIN32)
#define KILN_EXPORT __declspec(dllexport)
#else
#define KILN_EXPORT __attribute__((visibility("default")))
#endif

/**
 * Whether `field` of the struct at `ptr` lies within the struct_size its allocator set: readers and
 * writers of a struct allocated by the other side touch only such fields (ABI.md, "Struct sizes").
 */
#define KILN_FITS(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/** Name of the one symbol every plugin exports. */
#define KILN_PLUGIN_ENTRY_SYMBOL "kiln_plugin_get_descriptor"

/* ------------------------------------------------------------------------------------------------
 * Status and errors
 * --------------------------------------------------------------------------------------------- */

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERR_INVALID_ARGUMENT = 1, /**< the caller passed something malformed */
  KILN_ERR_UNSUPPORTED = 2,      /**< the plugin does not support what was asked */
  KILN_ERR_OUT_OF_MEMORY = 3,
  KILN_ERR_NOT_FOUND = 4,        /**< a named thing (tensor, op, key) does not exist */
  KILN_ERR_INTERNAL = 5,         /**< a bug or an unexpected exception inside the plugin */
} kiln_status;

/** Fixed-size error message, filled by the callee on failure. No allocation crosses the ABI. */
typedef struct kiln_error {
  kiln_status status;
  char message[1020];
} kiln_error;

/** A borrowed string (not necessarily NUL-terminated). */
typedef struct kiln_str {
  const char* data;
  size_t size;
} kiln_str;

/* ------------------------------------------------------------------------------------------------
 * Parsers: reasoning separation and tool calls, incremental.
 *
 * feed(delta) emits events through a sink callback; finish() flushes what was held back. A one-shot
 * parse is feed(all) + finish(). Events map one-to-one onto OpenAI streaming deltas:
 *   CONTENT          -> delta.content
 *   REASONING        -> delta.reasoning_content
 *   TOOL_CALL_START  -> delta.tool_calls[{index, id, type:"function", function:{name}}]
 *   TOOL_CALL_ARGS   -> delta.tool_calls[{index, function:{arguments: text}}]
 * The concatenated TOOL_CALL_ARGS of one call are exactly its final arguments JSON.
 * Partial tags are held back, never emitted and later retracted.
 * --------------------------------------------------------------------------------------------- */

typedef enum kiln_parse_event_kind {
  KILN_EVENT_CONTENT = 1,
  KILN_EVENT_REASONING = 2,
  KILN_EVENT_TOOL_CALL_START = 3,
  KILN_EVENT_TOOL_CALL_ARGS = 4,
} kiln_parse_event_kind;

typedef struct kiln_parse_event {
  uint32_t struct_size;
  uint32_t kind;       /**< kiln_parse_event_kind */
  uint32_t tool_index; /**< index of the call within this message (TOOL_CALL_*) */
  uint32_t reserved0;
  kiln_str text;       /**< CONTENT / REASONING / TOOL_CALL_ARGS payload */
  kiln_str id;         /**< TOOL_CALL_START: the call id (may be empty: the host assigns one) */
  kiln_str name;       /**< TOOL_CALL_START: function name */
  void* reserved[4];
} kiln_parse_event;

/** Receives events; the strings are valid only during the call. */
typedef void (*kiln_event_sink)(void* user, const kiln_parse_event* event);

typedef struct kiln_parser_options {
  uint32_t struct_size;
  /** Thinking mode the prompt was rendered with: -1 = template default, 0 = off, 1 = on. */
  int32_t thinking;
  /** The request's `tools` array as JSON text (OpenAI shape), or empty. Types tool arguments. */
  kiln_str tools_json;
  /** The tail of the rendered prompt (e.g. to see whether it already opened `<think>`). */
  kiln_str prompt_tail;
  void* reserved[8];
} kiln_parser_options;

/** The vtable shared by reasoning parsers and tool-call parsers. */
typedef struct kiln_parser_vtable {
  uint32_t struct_size;
  uint32_t reserved0;
  /** Creates a per-request parser. Returns NULL and fills `err` on failure. */
  void* (*create)(const kiln_parser_options* options, kiln_error* err);
  void (*destroy)(void* self);
  /** Consumes a text delta; emits zero or more events. */
  kiln_status (*feed)(void* self, kiln_str delta, kiln_event_sink sink, void* user, kiln_error* err);
  /** End of stream: emits everything still held back. */
  kiln_status (*finish)(void* self, kiln_event_sink sink, void* user, kiln_error* err);
  void* reserved[8];
} kiln_parser_vtable;

/* ------------------------------------------------------------------------------------------------
 * Models: hyperparameters, a tensor table, per-layer cache kinds, and a forward graph built through
 * the host's op table. The host owns weights, buffers, caches and execution.
 * --------------------------------------------------------------------------------------------- */

typedef enum kiln_dtype {
  KILN_DTYPE_F32 = 0,
  KILN_DTYPE_F16 = 1,
  KILN_DTYPE_BF16 = 2,
  KILN_DTYPE_I32 = 3,
  KILN_DTYPE_Q8_0 = 4, /**< ggml Q8_0 blocks: 32 values as an f16 scale + 32 int8 (34 bytes) */
  KILN_DTYPE_Q4_0 = 5, /**< ggml Q4_0 blocks: 32 values as an f16 scale + 16 bytes of nibbles (18 bytes) */
  /* ABI 2.2: the host's quantized KV-cache formats (YAML cache.kv_dtype q8 / q4). A plugin meets
     them only on the "k" / "v" cache tensors it hands to SET_ROWS and ATTENTION. Each row of D
     values (the head dim, a multiple of 8) holds groups of G = min(32, largest power of two dividing
     D): the D quantized values, then D/G f16 scales, padded to a multiple of 4 bytes
     (docs/backend.md, "Quantized KV cache"). */
  KILN_DTYPE_KV_Q8 = 6, /**< int8 values, value = q·scale, q in [-127, 127] */
  KILN_DTYPE_KV_Q4 = 7, /**< int4 values two per byte (even element low nibble), value = (nibble − 8)·scale */
  /* ABI 2.3: the rest of ggml's weight block formats, byte for byte as a GGUF file holds them (ggml's
     ggml-common.h defines each layout; docs/backend.md, "Tensor conventions"). 32 values per block for
     Q4_1 / Q5_0 / Q5_1 / IQ4_NL, 256 for the k-quants and IQ4_XS. A plugin sees them on the weights
     it declares KILN_DTYPE_ANY and hands to MATMUL, MOE_MATMUL and GET_ROWS. */
  KILN_DTYPE_Q4_1 = 8,    /**< 20 bytes: f16 d, f16 m, 16 bytes of nibbles; value = q·d + m */
  KILN_DTYPE_Q5_0 = 9,    /**< 22 bytes: f16 d, 32 high bits, 16 bytes of nibbles; value = (q − 16)·d */
  KILN_DTYPE_Q5_1 = 10,   /**< 24 bytes: f16 d, f16 m, 32 high bits, nibbles; value = q·d + m */
  KILN_DTYPE_Q2_K = 11,   /**< 84 bytes per 256: 4-bit scales and mins per 16, 2-bit values */
  KILN_DTYPE_Q3_K = 12,   /**< 110 bytes per 256: 6-bit scales per 16, 3-bit values */
  KILN_DTYPE_Q4_K = 13,   /**< 144 bytes per 256: 6-bit scales and mins per 32, 4-bit values */
  KILN_DTYPE_Q5_K = 14,   /**< 176 bytes per 256: 6-bit scales and mins per 32, 5-bit values */
  KILN_DTYPE_Q6_K = 15,   /**< 210 bytes per 256: int8 scales per 16, 6-bit values */
  KILN_DTYPE_IQ4_NL = 16, /**< 18 bytes per 32: f16 d, 4-bit indices into a fixed 16-value table */
  KILN_DTYPE_IQ4_XS = 17, /**< 136 bytes per 256: 6-bit scales per 32, IQ4_NL's table */
  KILN_DTYPE_ANY = 255 /**< tensor declarations: accept whatever the checkpoint holds */
} kiln_dtype;

typedef enum kiln_cache_kind {
  KILN_CACHE_NONE = 0,           /**< the layer keeps no per-sequence state */
  KILN_CACHE_FULL_KV = 1,        /**< paged KV over the whole context */
  KILN_CACHE_SLIDING_KV = 2,     /**< paged KV keeping only the last `window` tokens */
  KILN_CACHE_RECURRENT = 3,      /**< fixed-size per-sequence state (e.g. conv + SSM state) */
} kiln_cache_kind;

#define KILN_MAX_DIMS 4

typedef struct kiln_tensor_decl {
  uint32_t struct_size;
  uint32_t dtype;                 /**< kiln_dtype the tensor must have, or KILN_DTYPE_ANY */
  /**
   * Checkpoint name, e.g. "model.layers.3.mlp.up_proj.weight". With `stack` > 0 the name contains
   * "{}", replaced by 0 .. stack-1; the host stacks those tensors along a new outermost dimension
   * (per-expert checkpoints -> [E, ...]) and the graph refers to the tensor by this pattern.
   */
  const char* name;
  uint32_t ndim;
  uint32_t optional;              /**< nonzero: absent in the checkpoint is fine (weight() gives 0) */
  int64_t shape[KILN_MAX_DIMS];   /**< row-major, outermost first (including the stacked dim); -1 = any */
  /**
   * Nonzero: the host converts floating-point data of any stored type (F32/F16/BF16/Q8_0/Q4_0) to
   * `dtype` at load (norm weights and biases that ops read as f32). Zero: a different stored dtype
   * is an error naming the tensor, the expected and the found dtype, and the file.
   */
  uint32_t convert;
  uint32_t stack;                 /**< see `name`; 0: a single checkpoint tensor */
  uint32_t flags;                 /**< KILN_TENSOR_* */
  uint32_t reserved0;
  void* reserved[4];
} kiln_tensor_decl;

/**
 * kiln_tensor_decl.flags: the tensor stays in host memory (the mapped file) and never occupies
 * device memory. The only op that may read it is GET_ROWS with a batch input as the ids ("tokens"):
 * the host gathers those rows itself (as f32) and hands the graph the result. For embedding tables
 * too large to be worth device memory (Gemma 4's per-layer embeddings: 4.7-5.6 GB). A single
 * checkpoint tensor (no `stack`), any floating-point dtype.
 */
#define KILN_TENSOR_HOST 1u


/** Where the weights come from: tensor names and metadata keys differ (the plugin maps them). */
typedef enum kiln_checkpoint_format {
  KILN_CHECKPOINT_HF = 1,   /**< Hugging Face directory: config.json + safetensors */
  KILN_CHECKPOINT_GGUF = 2, /**< GGUF: metadata rendered as a JSON object of "key": value */
} kiln_checkpoint_format;

typedef struct kiln_layer_cache_desc {
  uint32_t struct_size;
  uint32_t kind;                  /**< kiln_cache_kind */
  uint32_t n_kv_heads;            /**< FULL_KV / SLIDING_KV */
  uint32_t head_dim_k;
  uint32_t head_dim_v;
  uint32_t window;                /**< SLIDING_KV: tokens kept */
  int32_t shares_with;            /**< reuse another layer's KV (-1: own) */
  uint32_t n_state;               /**< RECURRENT: number of state tensors */
  int64_t state_shape[2][KILN_MAX_DIMS]; /**< RECURRENT: per-sequence shapes of up to two states */
  uint32_t state_dtype[2];        /**< RECURRENT: KILN_DTYPE_F32 (the ops keep state in f32; the host
                                       refuses any other type) */
  void* reserved[4];
  /* ABI 2.2: */
  uint32_t flags;                 /**< KILN_LAYER_* */
} kiln_layer_cache_desc;

/**
 * kiln_layer_cache_desc.flags: the layer's keys and values are sensitive to quantization (e.g. a
 * layer whose cache many later layers read): with a quantized cache.kv_dtype the host keeps it at
 * 16 bits unless the YAML names the layer in cache.kv_layers.
 */
#define KILN_LAYER_KV_SENSITIVE 1u

/** Scalar hyperparameters every model reports (architecture-specific ones stay in the plugin). */
typedef struct kiln_model_hparams {
  uint32_t struct_size;
  uint32_t n_layers;
  uint32_t n_vocab;
  uint32_t n_embd;
  uint32_t max_context;
  uint32_t bos_token;             /**< UINT32_MAX when absent */
  const char* architecture;       /**< e.g. "qwen3", static storage in the plugin */
  void* reserved[8];
} kiln_model_hparams;

/** Opaque handle of a tensor inside the graph being built (0 is invalid). */
typedef uint32_t kiln_tensor;

/**
 * The op vocabulary. New ops are appended (minor bump); values never change once released.
 *
 * Conventions (full semantics, layouts and tolerances: docs/backend.md):
 * - Shapes are row-major, outermost first; the last dimension is contiguous. "[..., D]" means any
 *   leading dimensions.
 * - Activations are f32. Weights read by GET_ROWS / MATMUL / MOE_MATMUL may be f32, f16, bf16,
 *   Q8_0 or Q4_0 blocks; small weights used elementwise (norm weights, biases,
 *   per-expert scales) are f32 (the host converts them at load). Ids, positions, slots are i32.
 * - Every reduction runs in f32 in a fixed order that depends only on the row's own data, never on
 *   the batch size or the row's position in the batch (batch invariance).
 * - Ragged batches are described by the "seqs" input, i32 [S, 4], one row per sequence:
 *   {q_start (first row of the sequence in the token dimension), q_len (its tokens this step),
 *    kv_len (its context length after this step, so its tokens sit at positions
 *    kv_len - q_len ... kv_len - 1), state_slot (its row in recurrent-state tensors)}.
 * - Recurrent state (CONV1D_CAUSAL, GATED_DELTA): a sequence whose kv_len equals its q_len starts
 *   this step at position 0 and reads its state as zeros, whatever its slot holds (a slot is reused
 *   without being cleared); the op then writes the slot.
 */
typedef enum kiln_op {
  KILN_OP_NONE = 0,
  /* Data movement. */
  KILN_OP_GET_ROWS = 1,   /**< src0 table [R, ...] (any weight dtype), src1 ids i32 [N] -> f32 [N, ...] */
  KILN_OP_SET_ROWS = 2,   /**< src0 dst [R, ...] f32/f16/bf16/KV_Q8/KV_Q4 (written in place; KV formats
                               quantize each last-dim row), src1 rows f32 [N, ...], src2 slots i32 [N]
                               (-1: skip) -> dst. Writes KV-cache slots. */
  KILN_OP_RESHAPE = 3,    /**< src0 -> same data, shape/ndim (one -1 allowed); no copy */
  KILN_OP_SLICE = 4,      /**< src0, axis, [begin, end) -> copy of that range (end 0: to the end) */
  KILN_OP_CONCAT = 5,     /**< src0, src1 joined along axis (other dims equal) */
  /* Matrix products (weights in [out, in] = PyTorch layout, dequantized in the kernel). */
  KILN_OP_MATMUL = 6,     /**< src0 x f32 [..., K], src1 w [M, K] -> f32 [..., M] (x · wᵀ) */
  KILN_OP_MOE_MATMUL = 7, /**< src0 x f32 [N, K] or [N, k, K], src1 w [E, M, K], src2 ids i32 [N, k]
                               -> f32 [N, k, M]: row j of token n uses expert ids[n, j] */
  /* Elementwise (f32). ADD / MUL broadcast src1 onto src0 numpy-style (each dim equal or 1). */
  KILN_OP_ADD = 8,
  KILN_OP_MUL = 9,
  KILN_OP_SCALE = 10,     /**< x · scale + bias */
  KILN_OP_SILU = 11,
  KILN_OP_GELU_TANH = 12, /**< 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))) */
  KILN_OP_SIGMOID = 13,
  KILN_OP_SOFTPLUS = 14,  /**< log(1 + eˣ), x above 20 */
  KILN_OP_SOFTCAP = 15,   /**< cap · tanh(x / cap) */
  KILN_OP_EXP = 16,
  /* Row-wise over the last dimension. */
  KILN_OP_RMS_NORM = 17,  /**< src0 x [..., D], src1 w f32 [D] (modes WEIGHT, ONE_PLUS, GATED),
                               src2 z [..., D] (GATED: (w · x̂) · silu(z)); x̂ = x / √(mean(x²) + eps) */
  KILN_OP_L2_NORM = 18,   /**< x / √(Σx² + eps) */
  KILN_OP_SOFTMAX = 19,   /**< softmax(x · scale); scale 0 means 1 */
  /* Positional. */
  KILN_OP_ROPE = 20,      /**< src0 x f32 [N, H, D], src1 positions i32 [N]; mode, n_dims, n_freq, theta */
  /* Sequence mixers over the ragged batch. */
  KILN_OP_ATTENTION = 21, /**< src0 q f32 [N, Hq, Dk], src1 k cache [B, BS, Hkv, Dk], src2 v cache
                               [B, BS, Hkv, Dv] (f32/f16/bf16/KV_Q8/KV_Q4, k and v may differ),
                               src3 block_table i32 [S, MB], src4 seqs i32 [S, 4]
                               -> f32 [N, Hq, Dv]; causal, GQA, scale (0: 1/√Dk), window, cap */
  KILN_OP_CONV1D_CAUSAL = 22, /**< src0 x f32 [N, C], src1 w f32 [C, K], src2 state f32 [slots, K-1, C]
                                   (updated in place), src3 seqs -> f32 [N, C] (no activation) */
  KILN_OP_GATED_DELTA = 23,   /**< src0 q [N, Hk, Dk], src1 k [N, Hk, Dk], src2 v [N, Hv, Dv],
                                   src3 g (log decay) [N, Hv], src4 beta [N, Hv], src5 state f32
                                   [slots, Hv, Dk, Dv] (updated in place); seqs is src6 -> f32 [N, Hv, Dv].
                                   The chunked form's chunks end where the next position is a multiple
                                   of the chunk length, so a step boundary there (where a state can be
                                   snapshotted and restored) changes no bits. */
  /* Mixture of experts. */
  KILN_OP_TOP_K = 24,       /**< src0 f32 [N, E] -> ids i32 [N, k], descending, ties to the lower index */
  KILN_OP_MOE_WEIGHTS = 25, /**< src0 logits [N, E], src1 ids [N, k], src2 (optional) per-expert scale
                                 f32 [E] -> f32 [N, k]: softmax over all E, gather, renormalize (mode), × scale */
  KILN_OP_MOE_SUM = 26,     /**< src0 y [N, k, M], src1 weights [N, k] -> f32 [N, M] = Σ_j w[n,j] · y[n,j] */
  KILN_OP_COUNT
} kiln_op;

/** GATED_DELTA has 7 sources; every other op at most 5. */
#define KILN_OP_MAX_SRCS 7

/** RMS_NORM modes. */
typedef enum kiln_norm_mode {
  KILN_NORM_WEIGHT = 0,   /**< x̂ · w */
  KILN_NORM_ONE_PLUS = 1, /**< x̂ · (1 + w) (zero-centred weights: Qwen3.5, Gemma 1-3) */
  KILN_NORM_NONE = 2,     /**< x̂ */
  KILN_NORM_GATED = 3,    /**< (x̂ · w) · silu(z) (Qwen3.5 delta-net output norm) */
} kiln_norm_mode;

/**
 * ROPE modes. Rotated dims are [0, n_dims) (n_dims 0: the whole head); the pair index i runs over
 * [0, n_dims/2) with inv_freq_i = theta^(-2i / n_dims); pairs i >= n_freq (n_freq 0: all) keep a zero
 * angle, so Gemma 4's proportional RoPE is NEOX with n_dims = D, n_freq = 0.25·D/2, and Qwen3.5's
 * partial RoPE is NEOX with n_dims = 0.25·D. Angles are fp32 (pos · inv_freq), as HF computes them.
 */
typedef enum kiln_rope_mode {
  KILN_ROPE_NEOX = 0,   /**< pairs (i, i + n_dims/2): HF rotate_half */
  KILN_ROPE_NORMAL = 1, /**< pairs (2i, 2i + 1): GPT-J / llama.cpp "normal" */
} kiln_rope_mode;

/** GATED_DELTA forms (both carry state; both equal the recurrence up to fp32 rounding). */
typedef enum kiln_delta_mode {
  KILN_DELTA_AUTO = 0,      /**< the device's choice (the reference and GPUs: chunked for q_len > 1) */
  KILN_DELTA_RECURRENT = 1,
  KILN_DELTA_CHUNKED = 2,
} kiln_delta_mode;

/** MOE_WEIGHTS mode flags. */
#define KILN_MOE_RENORMALIZE 1u

/**
 * Op parameters: named fields shared between ops (zero-initialise, then set what the op reads;
 * the op list above and docs/backend.md say which). Fixed size; grows only through `reserved`.
 */
typedef struct kiln_op_params {
  float eps;      /**< RMS_NORM, L2_NORM */
  float scale;    /**< SCALE, SOFTMAX (0: 1), ATTENTION (0: 1/√Dk) */
  float bias;     /**< SCALE */
  float cap;      /**< SOFTCAP; ATTENTION logit softcap (0: none) */
  float theta;    /**< ROPE base */
  int32_t mode;   /**< RMS_NORM kiln_norm_mode, ROPE kiln_rope_mode, GATED_DELTA kiln_delta_mode,
                       MOE_WEIGHTS flags */
  int32_t axis;   /**< SLICE, CONCAT (negative counts from the end) */
  int64_t begin;  /**< SLICE */
  int64_t end;    /**< SLICE (0: the dimension's size) */
  int32_t n_dims; /**< ROPE: rotated span from dim 0 (0: the head dim) */
  int32_t n_freq; /**< ROPE: pairs with a non-zero frequency (0: all) */
  int32_t window; /**< ATTENTION: keys with q_pos - k_pos >= window are masked (0: no window) */
  int32_t k;      /**< TOP_K */
  int32_t chunk;  /**< GATED_DELTA chunk length (0: 64) */
  uint32_t ndim;  /**< RESHAPE */
  int64_t shape[KILN_MAX_DIMS]; /**< RESHAPE */
  uint32_t reserved[16];
} kiln_op_params;

/** The host's graph-building services, handed to a model plugin's build_graph. */
typedef struct kiln_host_ops {
  uint32_t struct_size;
  uint32_t abi_minor;            /**< the host's minor: ops added later may be absent */
  void* ctx;
  /** A checkpoint tensor by its declared name (0 when absent). */
  kiln_tensor (*weight)(void* ctx, const char* name);
  /**
   * Batch inputs (0 when unknown): "tokens" i32 [N], "positions" i32 [N], "logits_rows" i32 [R]
   * (rows whose logits are wanted), "seqs" i32 [S, 4] (see kiln_op).
   */
  kiln_tensor (*input)(void* ctx, const char* name);
  /**
   * A layer's cache tensors (0 when the layer has none): KV layers "k" [B, BS, Hkv, Dk],
   * "v" [B, BS, Hkv, Dv], "block_table" i32 [S, MB], "slots" i32 [N] (cache row of each token, for
   * SET_ROWS on k/v viewed as [B·BS, Hkv, D]); recurrent layers "state0", "state1" (the shapes the
   * layer declared, with a leading slots dimension). Layers sharing KV get their source's tensors.
   */
  kiln_tensor (*cache)(void* ctx, uint32_t layer, const char* name);
  /** Applies one op; returns 0 and fills err when the op/dtype/shape is not supported. */
  kiln_tensor (*op)(void* ctx, uint32_t op, const kiln_tensor* srcs, uint32_t n_srcs,
                    const kiln_op_params* params, kiln_error* err);
  /** Names an intermediate tensor so it can be dumped and compared with a golden. */
  void (*name)(void* ctx, kiln_tensor t, const char* name);
  /** Marks the graph's output (logits for the rows in "logits_rows"). */
  void (*output)(void* ctx, kiln_tensor t);
  /** Shape query: fills shape[KILN_MAX_DIMS], returns ndim (0 for an invalid handle). */
  uint32_t (*shape)(void* ctx, kiln_tensor t, int64_t* shape);
  /** Dtype query (a kiln_dtype; KILN_DTYPE_ANY for an invalid handle). */
  uint32_t (*dtype)(void* ctx, kiln_tensor t);
  void* reserved[6];
} kiln_host_ops;

/** One tensor as the checkpoint stores it (what a model may inspect at creation). */
typedef struct kiln_checkpoint_tensor {
  kiln_str name;
  uint32_t dtype;                /**< kiln_dtype; KILN_DTYPE_ANY for storage-only types (integers, f64) */
  uint32_t ndim;
  int64_t shape[KILN_MAX_DIMS];  /**< row-major, outermost first */
  /* ABI 2.1: */
  const void* data;              /**< the bytes as stored (valid while the model lives; e.g. a small
                                      table of constants such as GGUF rope_freqs); null from older hosts */
  uint64_t nbytes;
} kiln_checkpoint_tensor;

/** What the host tells a model at creation. */
typedef struct kiln_model_create_info {
  uint32_t struct_size;
  uint32_t format;               /**< kiln_checkpoint_format */
  kiln_str config_json;          /**< HF: config.json (text_config merged in for multimodal wrappers);
                                      GGUF: the metadata (tokenizer arrays left out) as a JSON object */
  kiln_str model_type;           /**< HF: `model_type` (text_config's for wrappers); GGUF: general.architecture */
  /**
   * Every tensor of the checkpoint (all shards), so a model can choose between spellings
   * ("model.language_model." or "model." prefixes, fused or per-expert tensors) and refuse a layout
   * it cannot serve at creation rather than at the first step. Element i is at
   * (const char*)tensors + i * tensor_stride (the host's sizeof(kiln_checkpoint_tensor)).
   */
  const kiln_checkpoint_tensor* tensors;
  uint32_t n_tensors;
  uint32_t tensor_stride;
  void* reserved[8];
} kiln_model_create_info;

/**
 * The shapes of one step's ragged batch (tokens flattened; no padding). build_graph must depend only
 * on these and on the shapes of the inputs and cache tensors it asks for (host_ops->shape), never on
 * their contents: the host builds a graph once per shape and runs it for every step of that shape
 * (ABI.md, "Graphs depend on shapes only"). Token ids, positions, block tables and state slots reach
 * the graph through its inputs.
 */
typedef struct kiln_batch_desc {
  uint32_t struct_size;
  uint32_t n_tokens;             /**< N */
  uint32_t n_seqs;               /**< S */
  uint32_t n_outputs;            /**< rows of "logits_rows" (the graph's output rows) */
  void* reserved[8];
} kiln_batch_desc;

/**
 * A model. hparams, tensor_decl and layer_cache fill a struct the host allocates: the host zeroes it
 * and sets its struct_size, and the plugin writes only the fields that fit (KILN_FITS).
 */
typedef struct kiln_model_vtable {
  uint32_t struct_size;
  uint32_t reserved0;
  void* (*create)(const kiln_model_create_info* info, kiln_error* err);
  void (*destroy)(void* self);
  kiln_status (*hparams)(void* self, kiln_model_hparams* out, kiln_error* err);
  /** Tensor table: count, then one declaration per index. */
  uint32_t (*tensor_count)(void* self);
  kiln_status (*tensor_decl)(void* self, uint32_t index, kiln_tensor_decl* out, kiln_error* err);
  /** Cache kind per layer. */
  kiln_status (*layer_cache)(void* self, uint32_t layer, kiln_layer_cache_desc* out, kiln_error* err);
  /** Builds the forward graph for one ragged batch using the host op table. */
  kiln_status (*build_graph)(void* self, const kiln_host_ops* ops, const kiln_batch_desc* batch,
                             kiln_error* err);
  void* reserved[8];
} kiln_model_vtable;

/* ------------------------------------------------------------------------------------------------
 * Descriptors
 * --------------------------------------------------------------------------------------------- */

typedef enum kiln_component_kind {
  KILN_COMPONENT_MODEL = 1,
  /* 2 was CACHE in ABI 1 (a plugin cache policy no host used); retired: models declare their
     per-layer cache kinds (kiln_layer_cache_desc) and the host owns every cache. */
  KILN_COMPONENT_REASONING_PARSER = 3,
  KILN_COMPONENT_TOOL_PARSER = 4,
} kiln_component_kind;

/** One named thing a plugin provides. `vtable` points at the kind's vtable struct. */
typedef struct kiln_component {
  uint32_t struct_size;
  uint32_t kind;               /**< kiln_component_kind */
  const char* name;            /**< registry name, e.g. "qwen3_coder"; unique per kind */
  const char* description;     /**< one line for `kiln plugins` */
  const void* vtable;          /**< kiln_model_vtable / kiln_parser_vtable */
  /** Model components: NULL-terminated list of config.json `model_type`s served. */
  const char* const* model_types;
  void* reserved[4];
} kiln_component;

typedef struct kiln_plugin_descriptor {
  uint32_t struct_size;
  uint16_t abi_major;
  uint16_t abi_minor;
  const char* plugin_name;
  const char* plugin_version;
  uint32_t component_count;
  uint32_t reserved0;
  const kiln_component* components;
  /** (optional) Looks up optional entry points by name; NULL or returning NULL when absent. */
  void* (*get_proc)(const char* name);
  void* reserved[8];
} kiln_plugin_descriptor;

/** The entry point. The host passes its own ABI version; a plugin may return NULL to refuse. */
typedef const kiln_plugin_descriptor* (*kiln_plugin_get_descriptor_fn)(uint32_t host_abi_major,
                                                                       uint32_t host_abi_minor);

/** Fills a kiln_error (safe for NULL `err`); usable by plugins written in C. */
static inline void kiln_error_set(kiln_error* err, kiln_status status, const char* message) {
  if (!err) return;
  err->status = status;
  size_t i = 0;
  if (message)
    for (; message[i] && i + 1 < sizeof(err->message); ++i) err->message[i] = message[i];
  err->message[i] = '\0';
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_PLUGIN_H */
