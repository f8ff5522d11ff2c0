/* The C entry to hybrid's ops, for other languages (scripts/hybrid_py.py wraps it with ctypes so
 * that peers and hybrid run on the same torch tensors in one process).
 *
 * An op call is its name plus its arguments as JSON: each field of the op's args struct by name;
 * a tensor is {"ptr": <address>, "dtype": "bf16", "shape": [...], "strides": [...]} (strides in
 * elements; the device is the context's), a float, int or bool field is a JSON number or bool:
 *   hybrid_run(ctx, "rms_norm", "{\"x\": {...}, \"weight\": {...}, \"out\": {...}, \"eps\": 1e-6}")
 * Work is queued on the context's stream (the caller's, after hybrid_context_set_stream), so the
 * calls can be captured in a CUDA graph by the caller. Returns 0, or -1 with the message in
 * hybrid_last_error(). */
#ifndef HYBRID_C_API_H
#define HYBRID_C_API_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hybrid_context hybrid_context;

/* device: "cpu", "cuda", "cuda:N". NULL on error. */
hybrid_context* hybrid_context_create(const char* device);
void hybrid_context_destroy(hybrid_context* ctx);
/* stream: a cudaStream_t (0 = the legacy default stream). */
int hybrid_context_set_stream(hybrid_context* ctx, void* stream);
int hybrid_run(hybrid_context* ctx, const char* op, const char* args_json);
/* The ops hybrid_run knows, comma-separated. */
const char* hybrid_ops(void);
/* The message of the last failed call on this thread. */
const char* hybrid_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
