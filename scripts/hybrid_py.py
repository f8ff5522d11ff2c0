"""ctypes wrapper of hybrid's C entry (include/hybrid/c_api.h) for torch tensors.

    import hybrid_py
    hy = hybrid_py.Hybrid("build-cuda/libhybrid_c.so", device="cuda:0")
    hy.run("gdn_chunk_prefill", q=q, k=k, v=v, g=g, beta=beta, cu_seqlens=cu, state_slots=slots,
           state=pool, out=o, use_qk_l2norm=True)

Tensors are passed by address with their dtype, shape and strides (no copy); the op is queued on
torch's current stream, so hybrid and torch calls can share one CUDA graph.
"""
import ctypes
import json

import torch

_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32",
    torch.int64: "i64", torch.uint8: "u8", torch.float64: "f64",
}


class Hybrid:
    def __init__(self, library, device="cuda:0"):
        self.lib = ctypes.CDLL(library)
        self.lib.hybrid_context_create.restype = ctypes.c_void_p
        self.lib.hybrid_context_create.argtypes = [ctypes.c_char_p]
        self.lib.hybrid_context_set_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.lib.hybrid_run.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
        self.lib.hybrid_last_error.restype = ctypes.c_char_p
        self.lib.hybrid_context_destroy.argtypes = [ctypes.c_void_p]
        self.ctx = self.lib.hybrid_context_create(device.encode())
        if not self.ctx:
            raise RuntimeError(self.lib.hybrid_last_error().decode())
        self.device = device

    def __del__(self):
        if getattr(self, "ctx", None):
            self.lib.hybrid_context_destroy(self.ctx)

    @staticmethod
    def _arg(value):
        if isinstance(value, torch.Tensor):
            return {"ptr": value.data_ptr(), "dtype": _DTYPES[value.dtype],
                    "shape": list(value.shape), "strides": list(value.stride())}
        return value

    def run(self, op, **args):
        stream = torch.cuda.current_stream().cuda_stream if self.device.startswith("cuda") else 0
        if self.lib.hybrid_context_set_stream(self.ctx, ctypes.c_void_p(stream)) != 0:
            raise RuntimeError(self.lib.hybrid_last_error().decode())
        payload = json.dumps({k: self._arg(v) for k, v in args.items() if v is not None})
        if self.lib.hybrid_run(self.ctx, op.encode(), payload.encode()) != 0:
            raise RuntimeError(self.lib.hybrid_last_error().decode())
